package jsonl_test

import (
	"context"
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
	g.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "rollouts-00000.jsonl" {
		t.Fatalf("after Abort the directory holds %v", entries)
	}
}
