package readback

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Dir reads back every committed part file (part-*.parquet) of an
// output directory (OUTPUT/data, say), in file order. Every Arrow buffer it
// allocates is released before it returns; it fails if any is left. It
// holds every row in memory: for large outputs read files one by one with
// File, or query them with DuckDB or pyarrow.
func Dir(dir string) ([]*pipeline.Rollout, error) {
	paths, err := filepath.Glob(filepath.Join(dir, schema.PartGlob))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*pipeline.Rollout
	for _, p := range paths {
		rs, err := File(p)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// File reads back one Parquet file of the output schema.
func File(path string) ([]*pipeline.Rollout, error) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	rs, err := read(path, alloc)
	if n := alloc.CurrentAlloc(); n != 0 && err == nil {
		err = fmt.Errorf("%s: the reader left %d bytes allocated", path, n)
	}
	return rs, err
}

func read(path string, alloc memory.Allocator) ([]*pipeline.Rollout, error) {
	f, err := pqread.Open(path, alloc, 256)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	var out []*pipeline.Rollout
	err = f.Records(context.Background(), nil, func(rec arrow.Record) error {
		rs, err := schema.Rollouts(rec)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, rs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Steps reads back every committed steps file (part-*.parquet) of a
// steps directory (OUTPUT/steps), in file order (StepsFile).
func Steps(dir string) ([]schema.StepRow, error) {
	paths, err := filepath.Glob(filepath.Join(dir, schema.PartGlob))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []schema.StepRow
	for _, p := range paths {
		rows, err := StepsFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// StepsFile reads back one steps file, checking its steps schema
// version.
func StepsFile(path string) ([]schema.StepRow, error) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	f, err := pqread.Open(path, alloc, 256)
	if err != nil {
		return nil, err
	}
	if v := f.Metadata()[schema.StepsMetadataKey]; v != schema.StepsVersion {
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("%s: steps schema version %q, want %s", path, v, schema.StepsVersion)
	}
	var out []schema.StepRow
	err = f.Records(context.Background(), nil, func(rec arrow.Record) error {
		rows, err := schema.StepRows(rec)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, rows...)
		return nil
	})
	_ = f.Close() // best effort: read only
	if err != nil {
		return nil, err
	}
	if n := alloc.CurrentAlloc(); n != 0 {
		return nil, fmt.Errorf("%s: the reader left %d bytes allocated", path, n)
	}
	return out, nil
}
