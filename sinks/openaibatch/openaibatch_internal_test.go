package openaibatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/schema"
)

// A resume removes the OpenAI Batch files whose part was never committed
// (a kill between a commit's renames) and the staged ones, and keeps the
// others.
func TestPair(t *testing.T) {
	out := t.TempDir()
	dir := filepath.Join(out, schema.OpenAIBatchDir)
	for _, d := range []string{dir, filepath.Join(out, schema.DataDir), filepath.Join(out, schema.ErrorsDir)} {
		os.MkdirAll(d, 0o755)
	}
	touch := func(p string) {
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch(filepath.Join(out, schema.DataDir, schema.PartName(1)))
	touch(filepath.Join(out, schema.ErrorsDir, schema.PartName(0)))
	keep := []string{
		schema.OpenAIBatchName(schema.OpenAIBatchOutput, schema.DataDir, 1),
		schema.OpenAIBatchName(schema.OpenAIBatchErrors, schema.DataDir, 1),
		schema.OpenAIBatchName(schema.OpenAIBatchErrors, schema.ErrorsDir, 0),
		"notes.txt",
	}
	drop := []string{
		schema.OpenAIBatchName(schema.OpenAIBatchOutput, schema.DataDir, 2),
		schema.OpenAIBatchName(schema.OpenAIBatchErrors, schema.ErrorsDir, 1),
		schema.OpenAIBatchName(schema.OpenAIBatchOutput, schema.FilteredDir, 0),
		".output-data.jsonl.tmp",
	}
	for _, n := range append(slices.Clone(keep), drop...) {
		touch(filepath.Join(dir, n))
	}
	if err := Pair(out); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(keep)
	if !slices.Equal(got, keep) {
		t.Fatalf("left %v, want %v", got, keep)
	}
	if err := Pair(t.TempDir()); err != nil {
		t.Fatalf("no openai_batch directory: %v", err)
	}
}

func TestBatchFileOf(t *testing.T) {
	for _, tc := range []struct {
		name, dest string
		n          int
		ok         bool
	}{
		{schema.OpenAIBatchName(schema.OpenAIBatchOutput, schema.DataDir, 12), schema.DataDir, 12, true},
		{schema.OpenAIBatchName(schema.OpenAIBatchErrors, schema.SurplusDir, 0), schema.SurplusDir, 0, true},
		{"output-00001.jsonl", "", 0, false},
		{"output-data-x.jsonl", "", 0, false},
		{"rollouts-00001.jsonl", "", 0, false},
		{"output-data-00001.json", "", 0, false},
	} {
		dest, n, ok := batchFileOf(tc.name)
		if dest != tc.dest || n != tc.n || ok != tc.ok {
			t.Errorf("%s: %q %d %v, want %q %d %v", tc.name, dest, n, ok, tc.dest, tc.n, tc.ok)
		}
	}
}
