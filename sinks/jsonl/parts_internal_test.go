package jsonl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// A resume removes the NeMo Gym JSONL files whose part was never
// committed (a kill between a commit's renames) and the staged ones, and
// keeps the others: those of committed parts, the one-per-run files of
// earlier versions, anything else.
func TestPairParts(t *testing.T) {
	out := t.TempDir()
	dir := filepath.Join(out, schema.JSONLDir)
	for _, d := range []string{dir, filepath.Join(out, schema.DataDir), filepath.Join(out, schema.FilteredDir)} {
		os.MkdirAll(d, 0o755)
	}
	touch := func(p string) {
		if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	touch(filepath.Join(out, schema.DataDir, schema.PartName(0)))
	touch(filepath.Join(out, schema.FilteredDir, schema.PartName(3)))
	keep := []string{
		schema.GymJSONLName(schema.DataDir, 0),
		schema.GymJSONLName(schema.FilteredDir, 3),
		schema.JSONLPrefix + "00000" + schema.JSONLExt, // an earlier version's file
		"notes.txt",
	}
	drop := []string{
		schema.GymJSONLName(schema.DataDir, 1),
		schema.GymJSONLName(schema.ErrorsDir, 0),
		schema.GymJSONLName(schema.FilteredDir, 0),
		schema.TempName(schema.JSONLPrefix + schema.DataDir + schema.JSONLExt),
	}
	for _, n := range append(slices.Clone(keep), drop...) {
		touch(filepath.Join(dir, n))
	}
	if err := PairParts(out); err != nil {
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
	if err := PairParts(t.TempDir()); err != nil {
		t.Fatalf("no jsonl directory: %v", err)
	}
}

func TestGymFileOf(t *testing.T) {
	for _, tc := range []struct {
		name, dest string
		n          int
		ok         bool
	}{
		{schema.GymJSONLName(schema.DataDir, 12), schema.DataDir, 12, true},
		{schema.GymJSONLName(schema.SurplusDir, 0), schema.SurplusDir, 0, true},
		{schema.GymJSONLName(schema.ErrorsDir, 7), schema.ErrorsDir, 7, true},
		{"rollouts-00001.jsonl", "", 0, false},
		{"rollouts-steps-00001.jsonl", "", 0, false},
		{"rollouts-data-x.jsonl", "", 0, false},
		{"rollouts-data--1.jsonl", "", 0, false},
		{"rollouts-data-00001.json", "", 0, false},
		{"output-data-00001.jsonl", "", 0, false},
	} {
		dest, n, ok := gymFileOf(tc.name)
		if dest != tc.dest || n != tc.n || ok != tc.ok {
			t.Errorf("%s: %q %d %v, want %q %d %v", tc.name, dest, n, ok, tc.dest, tc.n, tc.ok)
		}
	}
}

// A part's lines are staged until it commits, renamed with its number;
// an aborted part's are dropped; directories outside output.jsonl_rows
// get none.
func TestGymFilesCommitAndAbort(t *testing.T) {
	out := t.TempDir()
	part, err := NewParts(sinks.PartEnv{Dir: out, Settings: settings{Key: true, RowsKey: RowsKept}})
	if err != nil {
		t.Fatal(err)
	}
	g := part.(*Parts)
	ctx := context.Background()
	dir := filepath.Join(out, schema.JSONLDir)
	groups := []*pipeline.Group{pipelinetest.Group(0, 3, 50), pipelinetest.Group(1, 3, 50)}
	for _, dest := range []string{schema.DataDir, schema.FilteredDir} {
		if err := g.Stage(ctx, dest, nil, groups); err != nil {
			t.Fatal(err)
		}
	}
	if names := ls(t, dir); len(names) != 1 || !schema.IsTemp(names[0]) {
		t.Fatalf("staged: %v; want one hidden file (filtered/ has no lines with jsonl_rows: kept)", names)
	}
	if err := g.Commit(schema.DataDir, filepath.Join(out, schema.DataDir, schema.PartName(4))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, schema.GymJSONLName(schema.DataDir, 4)))
	if err != nil || bytes.Count(b, []byte("\n")) != 6 {
		t.Fatalf("committed file: %v, %d lines, want 6", err, bytes.Count(b, []byte("\n")))
	}
	if err := g.Stage(ctx, schema.DataDir, nil, groups); err != nil {
		t.Fatal(err)
	}
	if err := g.Abort(schema.DataDir); err != nil {
		t.Fatal(err)
	}
	if names := ls(t, dir); !slices.Equal(names, []string{schema.GymJSONLName(schema.DataDir, 4)}) {
		t.Fatalf("after the abort: %v", names)
	}
}

func ls(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// settings are a run's settings by key, for tests.
type settings map[string]any

func (s settings) Setting(key string) (any, bool) {
	v, ok := s[key]
	return v, ok
}
