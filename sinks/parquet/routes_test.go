package parquet_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// routed_experts is dictionary-encoded (schema.Column.Dict): its column
// chunk, as Arrow's own reader finds it, says RLE_DICTIONARY, and the
// routes read back are those written, null where a row had none.
func TestRoutesDictionaryEncoded(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	grp := pipelinetest.Group(0, 4, 256)
	for i, r := range grp.Rollouts {
		if i == 2 {
			continue // a row without routes
		}
		n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		routes := &pipeline.Routes{Layers: 3, TopK: 2, Experts: make([]int16, n*6)}
		for j := range routes.Experts {
			routes.Experts[j] = int16((j*7 + i) % 64)
		}
		r.Routes = routes
	}
	c := collate.New(alloc, 16)
	defer c.Release()
	ctx := context.Background()
	if rec := c.Add(grp); rec != nil {
		t.Fatal("a record before the flush")
	}
	rec := c.Flush()
	if err := w.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, schema.PartName(0))
	f, err := file.OpenParquetFile(path, false, file.WithReadProps(parquet.NewReaderProperties(alloc)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	leaf := f.MetaData().Schema.ColumnIndexByName("routed_experts.list.element")
	if leaf < 0 {
		t.Fatal("no routed_experts.list.element column in the file")
	}
	chunk, err := f.MetaData().RowGroup(0).ColumnChunk(leaf)
	if err != nil {
		t.Fatal(err)
	}
	dict := false
	for _, e := range chunk.Encodings() {
		dict = dict || e == parquet.Encodings.RLEDict || e == parquet.Encodings.PlainDict
	}
	if !dict || !chunk.HasDictionaryPage() {
		t.Fatalf("routed_experts encodings %v, dictionary page %t: want a dictionary", chunk.Encodings(), chunk.HasDictionaryPage())
	}
	got, _ := readRollouts(t, path, alloc)
	if len(got) != len(grp.Rollouts) {
		t.Fatalf("read %d rows, want %d", len(got), len(grp.Rollouts))
	}
	for i, r := range grp.Rollouts {
		if !reflect.DeepEqual(got[i].Routes, r.Routes) {
			t.Fatalf("row %d: routes read back %+v, want %+v", i, got[i].Routes, r.Routes)
		}
	}
}
