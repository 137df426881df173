package pqread_test

import (
	"context"
	"errors"
	"github.com/trajflow/trajflow/schema"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// writeSink writes groups of 2 rollouts, each of about payload bytes,
// through trajflow's sink and returns the file and the rollouts.
func writeSink(t *testing.T, groups, payload int, compression string) (string, []*pipeline.Rollout) {
	t.Helper()
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{Compression: compression})
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.NewGoAllocator(), 2)
	defer c.Release()
	var want []*pipeline.Rollout
	write := func(rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	for g := range groups {
		grp := pipelinetest.Group(int64(g), 2, payload)
		want = append(want, grp.Rollouts...)
		write(c.Add(grp))
	}
	write(c.Flush())
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "part-00000.parquet"), want
}

func readAll(t *testing.T, path string, alloc memory.Allocator, batchRows int) ([]*pipeline.Rollout, int) {
	t.Helper()
	f, err := pqread.Open(path, alloc, batchRows)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []*pipeline.Rollout
	records := 0
	err = f.Records(context.Background(), nil, func(rec arrow.Record) error {
		records++
		rs, err := schema.Rollouts(rec)
		got = append(got, rs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, records
}

// Rows of several MiB (long message text, token ids and logprobs) written
// by the sink read back whole, every value equal.
func TestRecordsLargeRows(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	for _, tc := range []struct {
		name, compression string
		payload           int
	}{
		{"zstd-3MiB", "zstd", 3 << 20},
		{"none-3MiB", "none", 3 << 20},
		{"zstd-5MiB", "zstd", 5 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, want := writeSink(t, 1, tc.payload, tc.compression)
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			got, _ := readAll(t, path, alloc, 0)
			if n := alloc.CurrentAlloc(); n != 0 {
				t.Errorf("%d bytes left allocated", n)
			}
			if len(got) != len(want) {
				t.Fatalf("read %d rows, want %d", len(got), len(want))
			}
			for i := range want {
				if len(got[i].Messages[2].Content) < tc.payload/4 {
					t.Errorf("row %d: message of %d bytes, want a long one", i, len(got[i].Messages[2].Content))
				}
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("row %d differs", i)
				}
			}
		})
	}
}

// Records reads in the order and with the columns asked for, in batches.
func TestRecordsFieldsAndBatches(t *testing.T) {
	path, want := writeSink(t, 5, 1024, "zstd")
	f, err := pqread.Open(path, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cols, err := f.Fields("attempt", "task_index")
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	var tasks []int64
	err = f.Records(context.Background(), cols, func(rec arrow.Record) error {
		if rec.NumCols() != 2 || rec.Schema().Field(0).Name != "attempt" || rec.Schema().Field(1).Name != "task_index" {
			t.Fatalf("schema %s", rec.Schema())
		}
		sizes = append(sizes, rec.NumRows())
		for i := range int(rec.NumRows()) {
			tasks = append(tasks, rec.Column(1).(interface{ Value(int) int64 }).Value(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sizes, []int64{3, 3, 3, 1}) {
		t.Errorf("batch sizes %v, want [3 3 3 1]", sizes)
	}
	for i, r := range want {
		if tasks[i] != r.Task.Index {
			t.Fatalf("row %d: task_index %d, want %d", i, tasks[i], r.Task.Index)
		}
	}
	if _, err := f.Fields("nope"); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Fields(nope) = %v, want an error naming %s", err, path)
	}
	stop := errors.New("stop")
	if err := f.Records(context.Background(), nil, func(arrow.Record) error { return stop }); err != stop {
		t.Errorf("error of fn = %v, want it unchanged", err)
	}
}

type bigMsg struct {
	Role    string `parquet:"role"`
	Content string `parquet:"content"`
}

type bigRow struct {
	ID   int64    `parquet:"id"`
	Text string   `parquet:"text"`
	Msgs []bigMsg `parquet:"msgs,list"`
}

// writeHugeHeaders writes a file Arrow's reader cannot read: parquet-go's
// default page statistics copy the longest strings into each page header
// (four times), past the reader's 4 MiB limit.
func writeHugeHeaders(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "huge-headers.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pq.NewGenericWriter[bigRow](f, pq.DataPageStatistics(true))
	long := strings.Repeat("long text ", 150_000) // 1.5 MB
	rows := []bigRow{
		{ID: 1, Text: "a" + long, Msgs: []bigMsg{{Role: "user", Content: "a" + long}, {Role: "assistant", Content: "b"}}},
		{ID: 2, Text: "z" + long, Msgs: []bigMsg{{Role: "user", Content: "z" + long}}},
	}
	if _, err := w.Write(rows); err != nil {
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

// A file Arrow's reader fails on is an error naming the file and the
// column: a panic of the reader (struct column) or a column it ends early
// without an error (string column).
func TestRecordsReaderFault(t *testing.T) {
	path := writeHugeHeaders(t)
	f, err := pqread.Open(path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, col := range []string{"msgs", "text"} {
		t.Run(col, func(t *testing.T) {
			cols, err := f.Fields(col)
			if err != nil {
				t.Fatal(err)
			}
			err = f.Records(context.Background(), cols, func(arrow.Record) error { return nil })
			var re *pqread.ReadError
			if !errors.As(err, &re) {
				t.Fatalf("Records = %v, want a *ReadError", err)
			}
			if re.Path != path || re.Column != col || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "column "+col) {
				t.Errorf("error %q (path %q, column %q): want it to name %s and column %s", err, re.Path, re.Column, path, col)
			}
		})
	}
	// The id column alone is fine.
	cols, _ := f.Fields("id")
	var n int64
	if err := f.Records(context.Background(), cols, func(rec arrow.Record) error { n += rec.NumRows(); return nil }); err != nil || n != 2 {
		t.Errorf("id column: %d rows, %v; want 2 rows", n, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	good, _ := writeSink(t, 1, 1024, "zstd")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty.parquet":     {},
		"garbage.parquet":   []byte(strings.Repeat("not parquet ", 100)),
		"truncated.parquet": data[:len(data)/2],
		"no-footer.parquet": append(append([]byte{}, data[:len(data)-8]...), 0xff, 0xff, 0xff, 0x7f, 'P', 'A', 'R', '1'),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := pqread.Open(path, nil, 0)
			if err == nil {
				err = f.Records(context.Background(), nil, func(arrow.Record) error { return nil })
				f.Close()
			}
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want an error naming %s", err, path)
			}
		})
	}
	if _, err := pqread.Open(filepath.Join(dir, "missing.parquet"), nil, 0); err == nil || !strings.Contains(err.Error(), "missing.parquet") {
		t.Errorf("missing file: %v", err)
	}
}

func TestGuard(t *testing.T) {
	err := pqread.Guard("a.parquet", "messages", func() error { panic("index out of range") })
	var re *pqread.ReadError
	if !errors.As(err, &re) || re.Path != "a.parquet" || re.Column != "messages" {
		t.Fatalf("Guard = %#v", err)
	}
	if want := "a.parquet: column messages unreadable: reader panic: index out of range"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	plain := errors.New("plain")
	if err := pqread.Guard("a", "", func() error { return plain }); err != plain {
		t.Errorf("Guard passed %v, want the error of fn", err)
	}
}
