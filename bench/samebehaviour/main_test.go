package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// writeParquet writes rows (task_index, reward, gen_ms, turn_rewards) in
// the order given, with one key-value pair.
func writeParquet(t *testing.T, path string, tasks []int64, rewards, gen []float64) {
	t.Helper()
	md := arrow.NewMetadata([]string{"trajflow.run_id"}, []string{"r"})
	s := arrow.NewSchema([]arrow.Field{
		{Name: "task_index", Type: arrow.PrimitiveTypes.Int64},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float64},
		{Name: "gen_ms", Type: arrow.PrimitiveTypes.Float64},
		{Name: "turn_rewards", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
	}, &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	for i := range tasks {
		b.Field(0).(*array.Int64Builder).Append(tasks[i])
		b.Field(1).(*array.Float64Builder).Append(rewards[i])
		b.Field(2).(*array.Float64Builder).Append(gen[i])
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float64Builder).Append(rewards[i])
	}
	rec := b.NewRecord()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(s, f, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func dump(t *testing.T, path string) string {
	t.Helper()
	var b bytes.Buffer
	if err := dumpTable(&b, path); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTableSortsRowsAndBlanksTiming(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet"), filepath.Join(dir, "c.parquet")
	writeParquet(t, a, []int64{0, 1}, []float64{0.5, 1}, []float64{3, 4})
	// The same rows in the other order, other timings, the reward's last bit moved.
	writeParquet(t, b, []int64{1, 0}, []float64{1, 0.5000000000000001}, []float64{9, 8})
	// A reward that differs in the 9th digit.
	writeParquet(t, c, []int64{0, 1}, []float64{0.50000001, 1}, []float64{3, 4})
	da, db, dc := dump(t, a), dump(t, b), dump(t, c)
	if da != db {
		t.Errorf("same rows printed differently:\n%s\n%s", da, db)
	}
	if da == dc {
		t.Errorf("a reward differing in the 9th digit printed the same:\n%s", da)
	}
	for _, want := range []string{"meta trajflow.run_id=r\n", "rows 2\n",
		"task_index=0 reward=0.5 gen_ms=_ turn_rewards=[0.5]\n"} {
		if !strings.Contains(da, want) {
			t.Errorf("missing %q in:\n%s", want, da)
		}
	}
}

func TestJSONZeroesTimingAndRoundsFloats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.json")
	in := `{"created_at": 1796652481, "mean": 0.9750000000000002, "n": 12345678901,` +
		` "text": "created_at 0.12345678901234 \"x\"", "response": {"created_at":17}}`
	if err := os.WriteFile(path, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := dumpJSON(&b, path); err != nil {
		t.Fatal(err)
	}
	want := `{"created_at": 0, "mean": 0.975, "n": 12345678901,` +
		` "text": "created_at 0.12345678901234 \"x\"", "response": {"created_at":0}}`
	if b.String() != want {
		t.Errorf("got  %s\nwant %s", b.String(), want)
	}
}

func TestSkipLeavesColumnsAndKeysOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.parquet")
	writeParquet(t, path, []int64{0}, []float64{0.5}, []float64{3})
	skipped["reward"], skipped["trajflow.run_id"] = true, true
	defer func() { delete(skipped, "reward"); delete(skipped, "trajflow.run_id") }()
	d := dump(t, path)
	if strings.Contains(d, "reward=") || strings.Contains(d, "column reward ") || strings.Contains(d, "meta trajflow.run_id") {
		t.Errorf("a skipped name printed:\n%s", d)
	}
	if !strings.Contains(d, "task_index=0 gen_ms=_ turn_rewards=[0.5]\n") {
		t.Errorf("the other columns not printed:\n%s", d)
	}
}

func TestArrowStreamAndFileReadAlike(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "task_index", Type: arrow.PrimitiveTypes.Int64},
		{Name: "total_ms", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{2, 1}, nil)
	b.Field(1).(*array.Float64Builder).AppendValues([]float64{5, 6}, nil)
	rec := b.NewRecord()
	defer rec.Release()
	dir := t.TempDir()
	write := func(name string, open func(*os.File) interface {
		Write(arrow.Record) error
		Close() error
	}) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := open(f)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	stream := write("s.arrow", func(f *os.File) interface {
		Write(arrow.Record) error
		Close() error
	} {
		return ipc.NewWriter(f, ipc.WithSchema(s))
	})
	file := write("f.arrow", func(f *os.File) interface {
		Write(arrow.Record) error
		Close() error
	} {
		w, err := ipc.NewFileWriter(f, ipc.WithSchema(s))
		if err != nil {
			t.Fatal(err)
		}
		return w
	})
	want := "column task_index int64 nullable=false\ncolumn total_ms float64 nullable=false\nrows 2\n" +
		"task_index=1 total_ms=_\ntask_index=2 total_ms=_\n"
	for _, path := range []string{stream, file} {
		if got := dump(t, path); got != want {
			t.Errorf("%s:\ngot  %q\nwant %q", filepath.Base(path), got, want)
		}
	}
}
