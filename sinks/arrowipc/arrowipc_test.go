package arrowipc_test

import (
	"bytes"
	"context"
	"github.com/trajflow/trajflow/schema"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/arrowipc"
	"github.com/trajflow/trajflow/stages/collate"
)

func records(alloc memory.Allocator, groups int) []arrow.Record {
	c := collate.New(alloc, 6)
	defer c.Release()
	var out []arrow.Record
	for g := range groups {
		if rec := c.Add(pipelinetest.Group(int64(g), 3, 300)); rec != nil {
			out = append(out, rec)
		}
	}
	if rec := c.Flush(); rec != nil {
		out = append(out, rec)
	}
	return out
}

func TestStreamRoundTrip(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	recs := records(alloc, 5)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var buf bytes.Buffer
	w := arrowipc.New(&buf, schema.Schema(), alloc)
	for _, r := range recs {
		if err := w.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rd, err := ipc.NewReader(&buf, ipc.WithAllocator(alloc))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	i := 0
	for rd.Next() {
		if i >= len(recs) || !array.RecordEqual(rd.Record(), recs[i]) {
			t.Errorf("record %d differs", i)
		}
		i++
	}
	if i != len(recs) {
		t.Errorf("read %d records, want %d", i, len(recs))
	}
}

func TestFileCommitAndAbort(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	recs := records(alloc, 2)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	dir := t.TempDir()
	path := filepath.Join(dir, "rows.arrows")
	w, err := arrowipc.Create(path, schema.Schema(), alloc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), recs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("final file visible before Close: %v", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := ipc.NewReader(f, ipc.WithAllocator(alloc))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rd.Next() {
		n += int(rd.Record().NumRows())
	}
	rd.Release()
	if n != int(recs[0].NumRows()) {
		t.Errorf("read %d rows, want %d", n, recs[0].NumRows())
	}

	aborted := filepath.Join(dir, "aborted.arrows")
	w, err = arrowipc.Create(aborted, schema.Schema(), alloc)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(context.Background(), recs[0])
	w.Abort()
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("after Abort dir holds %d entries, want 1", len(es))
	}
}

func TestWrongSchema(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	b := array.NewRecordBuilder(alloc, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	rec := b.NewRecord()
	defer rec.Release()
	w := arrowipc.New(&bytes.Buffer{}, schema.Schema(), alloc)
	if err := w.Write(context.Background(), rec); err == nil {
		t.Error("Write accepted a record of another schema")
	}
}
