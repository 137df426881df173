package arrowipc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// The sink contract.
var (
	_ sinks.Sink    = (*Writer)(nil)
	_ sinks.Aborter = (*Writer)(nil)
)

// Writer writes records of one schema as an IPC stream. It is not safe
// for concurrent use.
type Writer struct {
	schema *arrow.Schema
	alloc  memory.Allocator
	out    io.Writer
	ipc    *ipc.Writer

	f     *durable.File // set when writing to a file
	final string
	done  bool
}

// New returns a Writer that streams records in schema to out (for example
// os.Stdout). Close ends the stream but does not close out.
func New(out io.Writer, schema *arrow.Schema, alloc memory.Allocator) *Writer {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	return &Writer{schema: schema, alloc: alloc, out: out}
}

// Create returns a Writer into the file path, written under a hidden
// temporary name and put in place by Close (durable.File). Path "-"
// writes to standard output.
func Create(path string, sc *arrow.Schema, alloc memory.Allocator) (*Writer, error) {
	if path == "-" {
		return New(os.Stdout, sc, alloc), nil
	}
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp := filepath.Join(dir, schema.TempName(name))
	// A temporary file a crashed writer left is replaced.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("arrowipc: remove stale %s: %w", tmp, err)
	}
	f, err := durable.CreateAs(tmp, path, 0o644)
	if err != nil {
		return nil, fmt.Errorf("arrowipc: create %s: %w", tmp, err)
	}
	w := New(f, sc, alloc)
	w.f, w.final = f, path
	return w, nil
}

// Write appends rec to the stream. The caller keeps ownership of rec.
func (w *Writer) Write(ctx context.Context, rec arrow.Record) error {
	if w.done {
		return errors.New("arrowipc: write after Close or Abort")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !rec.Schema().Equal(w.schema) {
		return fmt.Errorf("arrowipc: record schema differs from the stream's: %s", rec.Schema())
	}
	if w.ipc == nil {
		w.ipc = ipc.NewWriter(w.out, ipc.WithSchema(w.schema), ipc.WithAllocator(w.alloc))
	}
	if err := w.ipc.Write(rec); err != nil {
		return fmt.Errorf("arrowipc: write %s: %w", w.name(), err)
	}
	return nil
}

func (w *Writer) name() string {
	if w.final != "" {
		return w.final
	}
	return "stream"
}

// Close ends the stream (an empty stream still carries the schema) and,
// for a file, commits it: synced, renamed into place, the directory
// synced.
func (w *Writer) Close(ctx context.Context) error {
	_ = ctx
	if w.done {
		return nil
	}
	w.done = true
	if w.ipc == nil {
		w.ipc = ipc.NewWriter(w.out, ipc.WithSchema(w.schema), ipc.WithAllocator(w.alloc))
	}
	err := w.ipc.Close()
	if w.f == nil {
		return err
	}
	f := w.f
	w.f = nil
	if err != nil {
		return errors.Join(fmt.Errorf("arrowipc: commit %s: %w", w.final, err), f.Abort())
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("arrowipc: commit %s: %w", w.final, err)
	}
	return nil
}

// Abort discards a file being written; on a stream it only stops writing.
// The error says what failed to close or remove the file.
func (w *Writer) Abort() error {
	w.done = true
	if w.f == nil {
		return nil
	}
	err := w.f.Abort()
	w.f = nil
	return err
}
