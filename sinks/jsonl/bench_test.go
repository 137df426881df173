package jsonl_test

import (
	"context"
	"io"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/jsonl"
	"github.com/trajflow/trajflow/stages/collate"
)

// BenchmarkLines writes the lines of 128 groups of 8 rollouts (~2 KB of
// payload each) from their record (Write: the record decoded back into
// rollouts) and from the groups (WriteGroups), the same bytes.
func BenchmarkLines(b *testing.B) {
	var gs []*pipeline.Group
	c := collate.New(memory.NewGoAllocator(), 1<<20)
	defer c.Release()
	for task := range int64(128) {
		g := pipelinetest.Group(task, 8, 2048)
		gs = append(gs, g)
		c.Add(g)
	}
	rec := c.Flush()
	defer rec.Release()
	ctx := context.Background()
	for _, bc := range []struct {
		name  string
		write func(w *jsonl.Writer) error
	}{
		{"record", func(w *jsonl.Writer) error { return w.Write(ctx, rec) }},
		{"groups", func(w *jsonl.Writer) error { return w.WriteGroups(ctx, gs) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := jsonl.New(io.Discard)
			w.Overrides(nil, true)
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(w); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(rec.NumRows())/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
