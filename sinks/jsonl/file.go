package jsonl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// File is a JSONL sink whose whole file is committed at once: it is
// written under a temporary name and put in place by Close
// (durable.File), so a reader never sees a partial file. Abort removes it.
type File struct {
	f *durable.File
	w *Writer
}

var (
	_ sinks.Sink      = (*File)(nil)
	_ sinks.GroupSink = (*File)(nil)
	_ sinks.Aborter   = (*File)(nil)
)

// CreateNext creates the next free prefixNNNNNsuffix file in dir: a
// resumed run adds a file, it never overwrites one.
func CreateNext(dir, prefix, suffix string) (*File, error) {
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		final := filepath.Join(dir, fmt.Sprintf("%s%05d%s", prefix, i, suffix))
		if _, err := os.Stat(final); err == nil {
			continue
		}
		tmp := filepath.Join(dir, schema.TempName(filepath.Base(final)))
		// A temporary file a crashed writer left is replaced.
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("jsonl: remove stale %s: %w", tmp, err)
		}
		f, err := durable.CreateAs(tmp, final, 0o644)
		if err != nil {
			return nil, fmt.Errorf("jsonl: create %s: %w", tmp, err)
		}
		return &File{f: f, w: New(f)}, nil
	}
}

// Overrides sets the request overrides of the rows written (Writer.Overrides).
func (f *File) Overrides(params map[string]any, addSeed bool) { f.w.Overrides(params, addSeed) }

// Write appends one line per row of rec.
func (f *File) Write(ctx context.Context, rec arrow.Record) error { return f.w.Write(ctx, rec) }

// WriteGroups appends one line per rollout of gs, as the output records
// it (Writer.WriteGroups).
func (f *File) WriteGroups(ctx context.Context, gs []*pipeline.Group) error {
	return f.w.WriteGroups(ctx, gs)
}

// Close flushes the file and commits it: synced, renamed into place, the
// directory synced.
func (f *File) Close(ctx context.Context) error {
	if f.f == nil {
		return nil
	}
	if err := f.w.Close(ctx); err != nil {
		return err
	}
	df := f.f
	f.f = nil
	if err := df.Commit(); err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	return nil
}

// Abort removes the uncommitted file and returns what failed to close or
// remove it.
func (f *File) Abort() error {
	if f.f == nil {
		return nil
	}
	err := f.f.Abort()
	f.f = nil
	return err
}
