package parquet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

func ExampleWriter() {
	dir, _ := os.MkdirTemp("", "trajflow-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	w, err := pqsink.New(filepath.Join(dir, "data"), pqsink.Options{
		FileRows: 8,
		Metadata: map[string]string{schema.KeyRunID: "example"},
		OnCommit: func(path string, rows int) { fmt.Println("committed", filepath.Base(path), rows, "rows") },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := collate.New(memory.DefaultAllocator, 4)
	defer c.Release()
	for task := range int64(5) {
		if rec := c.Add(pipelinetest.Group(task, 4, 256)); rec != nil {
			err = w.Write(ctx, rec)
			rec.Release()
			if err != nil {
				w.Abort()
				fmt.Println(err)
				return
			}
		}
	}
	if err := w.Close(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// committed part-00000.parquet 8 rows
	// committed part-00001.parquet 8 rows
	// committed part-00002.parquet 4 rows
}
