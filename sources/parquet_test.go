package sources

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/pipeline"
)

// writeArrowParquet writes rows with Arrow's Parquet writer (the layout
// pyarrow and friends produce: nullable columns, 3-level lists), rowGroup
// rows per row group. Row i has question "q<i>", answer i, tags
// ["t<i>", ...] (i of them, null when i%4 == 3), and, for even i, a messages
// list holding one user message; row 5's messages hold a null entry.
func writeArrowParquet(t testing.TB, n, rowGroup int) string {
	t.Helper()
	msg := arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String},
	)
	meta := arrow.StructOf(
		arrow.Field{Name: "source", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "score", Type: arrow.PrimitiveTypes.Float64},
	)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "question", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "answer", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "messages", Type: arrow.ListOf(msg), Nullable: true},
		{Name: "meta", Type: meta, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.StringBuilder).Append("q" + itoa(i))
		b.Field(1).(*array.Int64Builder).Append(int64(i))
		tags := b.Field(2).(*array.ListBuilder)
		if i%4 == 3 {
			tags.AppendNull()
		} else {
			tags.Append(true)
			for j := range i {
				tags.ValueBuilder().(*array.StringBuilder).Append("t" + itoa(j))
			}
		}
		msgs := b.Field(3).(*array.ListBuilder)
		sb := msgs.ValueBuilder().(*array.StructBuilder)
		switch {
		case i == 5:
			msgs.Append(true)
			sb.AppendNull()
		case i%2 == 0:
			msgs.Append(true)
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append("user")
			sb.FieldBuilder(1).(*array.StringBuilder).Append("Solve q" + itoa(i))
		default:
			msgs.AppendNull()
		}
		mb := b.Field(4).(*array.StructBuilder)
		mb.Append(true)
		if i%3 == 0 {
			mb.FieldBuilder(0).(*array.StringBuilder).AppendNull()
		} else {
			mb.FieldBuilder(0).(*array.StringBuilder).Append("gsm8k")
		}
		mb.FieldBuilder(1).(*array.Float64Builder).Append(float64(i) + 0.5)
		b.Field(5).(*array.BooleanBuilder).Append(i%2 == 0)
	}
	rec := b.NewRecord()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "tasks.parquet")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(int64(rowGroup)))
	w, err := pqarrow.NewFileWriter(schema, f, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestParquetRows(t *testing.T) {
	p := writeArrowParquet(t, 10, 3)
	var rejects []Reject
	tasks, err := readAll(t, Config{Path: p, OnBadRow: "skip"}, Options{
		OnReject: func(r Reject) error { rejects = append(rejects, r); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := indexes(tasks), []int64{0, 1, 2, 3, 4, 6, 7, 8, 9}; !reflect.DeepEqual(got, want) {
		t.Fatalf("indexes %v, want %v", got, want)
	}
	// Row 5's messages hold a null entry: a bad row, named by its row.
	if len(rejects) != 1 || rejects[0].Where != p+":row 5" || rejects[0].Reason != "messages[0]: want a message object, got null" {
		t.Fatalf("rejects = %+v", rejects)
	}
	wantRaw := map[int64]string{
		0: `{"question":"q0","answer":0,"tags":[],"messages":[{"role":"user","content":"Solve q0"}],"meta":{"source":null,"score":0.5},"ok":true}`,
		2: `{"question":"q2","answer":2,"tags":["t0","t1"],"messages":[{"role":"user","content":"Solve q2"}],"meta":{"source":"gsm8k","score":2.5},"ok":true}`,
		3: `{"question":"q3","answer":3,"tags":null,"messages":null,"meta":{"source":null,"score":3.5},"ok":false}`,
	}
	for _, task := range tasks {
		if task.Source != p+":row "+itoa(int(task.Index)) {
			t.Errorf("task %d source %q", task.Index, task.Source)
		}
		if want, ok := wantRaw[task.Index]; ok && string(task.Raw) != want {
			t.Errorf("task %d raw\n got %s\nwant %s", task.Index, task.Raw, want)
		}
		if task.Fields["answer"] != json.Number(itoa(int(task.Index))) {
			t.Errorf("task %d answer %#v", task.Index, task.Fields["answer"])
		}
		var want []pipeline.Message
		if task.Index%2 == 0 {
			want = []pipeline.Message{{Role: "user", Content: "Solve q" + itoa(int(task.Index))}}
		}
		if !reflect.DeepEqual(task.Messages, want) {
			t.Errorf("task %d messages %+v, want %+v", task.Index, task.Messages, want)
		}
	}
}

func TestParquetSelection(t *testing.T) {
	// 4 row groups of 3 rows; row 5 is bad but never selected here.
	p := writeArrowParquet(t, 12, 3)
	tests := []struct {
		name string
		cfg  Config
		skip func(int64) bool
		want []int64
	}{
		{"limit", Config{Limit: 2}, nil, []int64{0, 1}},
		{"offset across row groups", Config{Offset: 7, Limit: 3}, nil, []int64{7, 8, 9}},
		{"offset past the end", Config{Offset: 12}, nil, []int64{}},
		{"shard", Config{Offset: 6, Shard: Shard{Index: 1, Count: 3}}, nil, []int64{7, 10}},
		{"skip", Config{Offset: 6}, func(i int64) bool { return i != 11 }, []int64{11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Path = p
			tasks, err := readAll(t, cfg, Options{Skip: tt.skip})
			if err != nil {
				t.Fatal(err)
			}
			if got := indexes(tasks); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("indexes %v, want %v", got, tt.want)
			}
			for _, task := range tasks {
				if task.Fields["question"] != "q"+itoa(int(task.Index)) {
					t.Errorf("task %d holds %v", task.Index, task.Fields["question"])
				}
			}
		})
	}
	t.Run("bad row stops in error mode", func(t *testing.T) {
		_, err := readAll(t, Config{Path: p}, Options{})
		if err == nil || err.Error() != p+":row 5: messages[0]: want a message object, got null" {
			t.Fatalf("err = %v", err)
		}
	})
}

type gymRow struct {
	Params struct {
		Input []struct {
			Role    string `parquet:"role"`
			Content string `parquet:"content"`
		} `parquet:"input,list"`
		Temperature float32 `parquet:"temperature"`
	} `parquet:"responses_create_params"`
	Expected string            `parquet:"expected_answer"`
	Extra    map[string]string `parquet:"extra"`
	Blob     []byte            `parquet:"blob"`
	IDs      []int32           `parquet:"ids"` // repeated leaf, no LIST annotation
}

func TestParquetNeMoGymRowsFromParquetGo(t *testing.T) {
	var row gymRow
	row.Params.Input = append(row.Params.Input, struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	}{"user", "What is 2+2?"})
	row.Params.Temperature = 0.7
	row.Expected = "4"
	row.Extra = map[string]string{"k": "v"}
	row.Blob = []byte{0xff, 0x00}
	row.IDs = []int32{3, 1}
	p := filepath.Join(t.TempDir(), "gym.pq")
	if err := pq.WriteFile(p, []gymRow{row}); err != nil {
		t.Fatal(err)
	}
	tasks, err := readAll(t, Config{Path: p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := tasks[0]
	want := `{"responses_create_params":{"input":[{"role":"user","content":"What is 2+2?"}],"temperature":0.7},"expected_answer":"4","extra":{"k":"v"},"blob":"/wA=","ids":[3,1]}`
	if string(task.Raw) != want {
		t.Errorf("raw\n got %s\nwant %s", task.Raw, want)
	}
	if !reflect.DeepEqual(task.Messages, []pipeline.Message{{Role: "user", Content: "What is 2+2?"}}) {
		t.Errorf("messages %+v", task.Messages)
	}
	if !reflect.DeepEqual(task.Params, map[string]any{"temperature": json.Number("0.7")}) {
		t.Errorf("params %#v", task.Params)
	}
}

func TestParquetEmpty(t *testing.T) {
	p := filepath.Join(t.TempDir(), "empty.parquet")
	if err := pq.WriteFile(p, []gymRow{}); err != nil {
		t.Fatal(err)
	}
	_, err := readAll(t, Config{Path: p}, Options{})
	if err == nil || !strings.Contains(err.Error(), p+": no rows") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParquet reads corrupted Parquet files: no panic, and every error
// names the file.
func FuzzParquet(f *testing.F) {
	good, err := os.ReadFile(writeArrowParquet(f, 6, 2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 100, byte(0xff))
	f.Add(good, len(good)-20, byte(0))
	f.Add(good, 4, byte(7))
	f.Add([]byte("PAR1PAR1"), 0, byte(0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, at int, b byte) {
		if len(data) > 0 {
			data = append([]byte(nil), data...)
			data[uint(at)%uint(len(data))] = b
		}
		p := filepath.Join(dir, "fuzz.parquet")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tasks, err := readAll(t, Config{Path: p, OnBadRow: "skip"}, Options{})
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Errorf("error does not name the file: %v", err)
		}
		for _, task := range tasks {
			if !json.Valid(task.Raw) {
				t.Errorf("task %d: invalid raw JSON %q", task.Index, task.Raw)
			}
		}
	})
}
