package pqread_test

import (
	"context"
	"github.com/trajflow/trajflow/internal/pqread"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// Batches of large rows hold about pqread.BatchBytes, not the batch rows asked.
func TestBatchForLargeRows(t *testing.T) {
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.NewGoAllocator(), 2)
	defer c.Release()
	rec := c.Add(pipelinetest.Group(0, 2, 1<<20))
	if rec == nil {
		t.Fatal("no record")
	}
	err = w.Write(context.Background(), rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := pqread.Open(filepath.Join(dir, "part-00000.parquet"), nil, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all := map[int]bool{}
	for i := range f.PF.MetaData().Schema.NumColumns() {
		all[i] = true
	}
	// Rows of about 1 MiB: 64 MiB batches hold about 64 of them.
	if b := pqread.BatchFor(f, all); b < 40 || b > 80 {
		t.Errorf("batch of %d rows of ~1 MiB, want about %d", b, pqread.BatchBytes>>20)
	}
	// The task_index column alone is 8 bytes a row: the rows asked.
	if b := pqread.BatchFor(f, map[int]bool{1: true}); b != 4096 {
		t.Errorf("batch of %d rows of task_index, want 4096", b)
	}
}
