package analyze

import (
	"context"
	"github.com/trajflow/trajflow/schema"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// groups returns pipelinetest groups for tasks [from, to): n = 8 for tasks
// divisible by 3, else 4. Every rollout gets run id runID.
func groups(runID string, from, to int64) []*pipeline.Group {
	var out []*pipeline.Group
	for t := from; t < to; t++ {
		n := 4
		if t%3 == 0 {
			n = 8
		}
		g := pipelinetest.Group(t, n, 200)
		g.Key.Attempt = g.Rollouts[0].Attempt
		for _, r := range g.Rollouts {
			r.RunID = runID
			// Spread the per-sample counts; let tasks 1, 5, 9... finish
			// without errors.
			r.CompletionTokens = int(r.Seed*7919%3000) + 1
			r.NumTurns = 1 + int(r.Seed%5)
			// Tasks 2, 7, 12...: replies without token ids (null
			// training-view counts), as from a chat server such as
			// Ollama.
			r.TokenIDsMissing = t%5 == 2
			if t%4 == 1 && r.Status == pipeline.StatusError {
				r.Status, r.Error, r.ErrorClass = pipeline.StatusOK, "", ""
				if !r.Kept {
					r.Status = pipeline.StatusFiltered
				}
			}
		}
		out = append(out, g)
	}
	return out
}

// writeRun writes gs with sinks/parquet into dir (records of batchRows
// rows) and returns the rollouts in write order.
func writeRun(t testing.TB, dir string, gs []*pipeline.Group, batchRows int, opts pqsink.Options) []*pipeline.Rollout {
	t.Helper()
	ctx := context.Background()
	w, err := pqsink.New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.DefaultAllocator, batchRows)
	defer c.Release()
	var all []*pipeline.Rollout
	write := func(rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gs {
		all = append(all, g.Rollouts...)
		write(c.Add(g))
	}
	write(c.Flush())
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return all
}

// readRollouts reads every row of files with Arrow's reader (ReadTable,
// independent of this package's batch reader) and decodes them.
func readRollouts(t testing.TB, alloc memory.Allocator, files ...string) ([]*pipeline.Rollout, []map[string]string) {
	t.Helper()
	var out []*pipeline.Rollout
	var metas []map[string]string
	for _, path := range files {
		f, err := file.OpenParquetFile(path, false, file.WithReadProps(parquet.NewReaderProperties(alloc)))
		if err != nil {
			t.Fatal(err)
		}
		meta := map[string]string{}
		for _, kv := range f.MetaData().KeyValueMetadata() {
			if kv.Value != nil {
				meta[kv.Key] = *kv.Value
			}
		}
		metas = append(metas, meta)
		r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, alloc)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := r.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tr := array.NewTableReader(tbl, 1<<20)
		for tr.Next() {
			rs, err := schema.Rollouts(tr.Record())
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, rs...)
		}
		tr.Release()
		tbl.Release()
		f.Close()
	}
	return out, metas
}

func parts(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// sortRollouts orders rollouts by (run_id, task_index, attempt,
// rollout_index).
func sortRollouts(rs []*pipeline.Rollout) {
	slices.SortStableFunc(rs, func(a, b *pipeline.Rollout) int {
		switch {
		case a.RunID != b.RunID:
			return compare(a.RunID, b.RunID)
		case a.Task.Index != b.Task.Index:
			return compare(a.Task.Index, b.Task.Index)
		case a.Attempt != b.Attempt:
			return compare(a.Attempt, b.Attempt)
		}
		return compare(a.RolloutIndex, b.RolloutIndex)
	})
}

func compare[T int | int64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
