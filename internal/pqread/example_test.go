package pqread_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

func ExampleFile_Records() {
	dir, _ := os.MkdirTemp("", "pqread-example-")
	defer os.RemoveAll(dir)
	w, _ := pqsink.New(dir, pqsink.Options{})
	c := collate.New(memory.NewGoAllocator(), 4)
	rec := c.Add(pipelinetest.Group(7, 4, 256))
	_ = w.Write(context.Background(), rec)
	rec.Release()
	c.Release()
	_ = w.Close(context.Background())

	f, err := pqread.Open(filepath.Join(dir, "part-00000.parquet"), nil, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	cols, _ := f.Fields("task_index", "rollout_index")
	err = f.Records(context.Background(), cols, func(rec arrow.Record) error {
		for i := range int(rec.NumRows()) {
			fmt.Println(rec.Column(0).(*array.Int64).Value(i), rec.Column(1).(*array.Int32).Value(i))
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// 7 0
	// 7 1
	// 7 2
	// 7 3
	// <nil>
}
