package jsonl_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/jsonl"
	"github.com/trajflow/trajflow/stages/collate"
)

// A File is invisible under its final name until Close, a second file
// never overwrites the first, and Abort leaves nothing behind.
func TestFileCommitsAtomically(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := collate.New(memory.NewGoAllocator(), 1)
	defer c.Release()
	rec := c.Add(pipelinetest.Group(0, 2, 64))
	defer rec.Release()

	f, err := jsonl.CreateNext(dir, "rollouts-", ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "rollouts-00000.jsonl")
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatalf("final file visible before Close: %v", err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(final)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}

	g, err := jsonl.CreateNext(dir, "rollouts-", ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := g.Abort(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "rollouts-00000.jsonl" {
		t.Fatalf("after Abort the directory holds %v", entries)
	}
}

// Abort says when it could not remove the staged file, and a second
// Abort has nothing left to do.
func TestFileAbortReportsWhatItLeaves(t *testing.T) {
	dir := t.TempDir()
	f, err := jsonl.CreateNext(dir, "rollouts-", ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".rollouts-00000.jsonl.tmp")
	// A non-empty directory where the staged file was: no remove takes
	// it, not even root's.
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = f.Abort()
	if err == nil || !strings.Contains(err.Error(), tmp) {
		t.Fatalf("Abort: %v, want the failure to remove %s", err, tmp)
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
}

// fullDisk fails every write, as a full disk does.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// The Writer buffers its lines: a write the buffer absorbs fails at Close,
// and Close says so.
func TestWriterCloseReportsAFailedFlush(t *testing.T) {
	ctx := context.Background()
	c := collate.New(memory.NewGoAllocator(), 1)
	defer c.Release()
	rec := c.Add(pipelinetest.Group(0, 2, 64))
	defer rec.Release()
	w := jsonl.New(io.Writer(fullDisk{}))
	if err := w.Write(ctx, rec); err != nil {
		t.Fatalf("Write: %v (the lines should fit the buffer)", err)
	}
	if err := w.Close(ctx); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Close: %v, want the failed flush", err)
	}
}
