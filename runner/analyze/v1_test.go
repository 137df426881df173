package analyze

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// v1File is a file in schema version 1, written by trajflow at ebfcace
// (testdata/schema-v1/README.md).
const v1File = "../../testdata/schema-v1/part-00000.parquet"

// v1Groups are the groups v1File holds; their light columns are the same
// in the current schema.
func v1Groups() []*pipeline.Group {
	var gs []*pipeline.Group
	for task := range int64(5) {
		gs = append(gs, pipelinetest.Group(task, 4, 120))
	}
	return gs
}

// Stats reads files of schema version 1 (its light columns are the
// current ones), alone or next to current ones, and gives the metrics of
// the same rollouts written in the current schema.
func TestStatsReadsV1(t *testing.T) {
	dir := t.TempDir()
	v2 := filepath.Join(dir, "v2")
	writeRun(t, v2, v1Groups(), 8, pqsink.Options{})
	v2File := parts(t, v2)[0]
	for _, tt := range []struct {
		name     string
		paths    []string
		fromPath string // the same rows in the current schema
	}{
		{"v1 alone", []string{v1File}, v2File},
		{"v1 and v2", []string{v1File, v2File}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			got, err := Stats(context.Background(), tt.paths, nil, StatsOptions{Allocator: alloc, BatchRows: 7})
			if err != nil {
				t.Fatal(err)
			}
			alloc.AssertSize(t, 0)
			var want *metrics.Metrics
			if tt.fromPath != "" {
				want, err = Stats(context.Background(), []string{tt.fromPath}, nil, StatsOptions{})
			} else {
				// The v1 rows, then the same rows again: the aggregate of the
				// rollouts fed twice.
				agg := metrics.NewWithOptions(metrics.Options{})
				for range 2 {
					for _, g := range v1Groups() {
						for _, r := range g.Rollouts {
							agg.Add(r)
						}
					}
				}
				want = agg.Result()
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Rows != int64(20*len(tt.paths)) || got.Status["error"] == 0 || got.Groups.Dropped == 0 {
				t.Fatalf("fixture too plain: %+v", got)
			}
			// Version 1 has no gen_tokens, total_tokens, turn_gen_tokens:
			// its NeMo RL token means come from completion_tokens and its
			// per-turn generated tokens are 0 (docs/metrics.md).
			noTokenMeans(got)
			noTokenMeans(want)
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(want, "", " ")
				t.Errorf("stats of v1\n%s\nwant\n%s", gj, wj)
			}
		})
	}
}

// noTokenMeans zeroes the NeMo RL token means and per-turn generated
// tokens of m and its envs.
func noTokenMeans(m *metrics.Metrics) {
	m.MeanGenTokensPerSample, m.MeanTotalTokensPerSample = nil, nil
	for i := range m.PerTurn {
		m.PerTurn[i].GenTokens = nil
	}
	for _, e := range m.Envs {
		noTokenMeans(e)
	}
}

// Merge writes the current schema version only: a v1 file is refused,
// alone or with current files, by name and version, before anything is
// written.
func TestMergeRefusesV1(t *testing.T) {
	dir := t.TempDir()
	v2 := filepath.Join(dir, "v2")
	writeRun(t, v2, groups("run-b", 0, 3), 8, pqsink.Options{})
	v2File := parts(t, v2)[0]
	tests := []struct {
		name   string
		inputs []string
		want   string
	}{
		{"v1 alone", []string{v1File},
			v1File + " has schema version 1; merge writes only version " + schema.Version},
		{"v1 first", []string{v1File, v2},
			v1File + " has schema version 1 but " + v2File + " has " + schema.Version + ": refusing to merge different schema versions into one output"},
		{"v1 last", []string{v2, v1File},
			v1File + " has schema version 1 but " + v2File + " has " + schema.Version + ": refusing to merge different schema versions into one output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "merged")
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			_, err := Merge(context.Background(), tt.inputs, out, MergeOptions{Allocator: alloc})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Merge = %v, want an error with %q", err, tt.want)
			}
			alloc.AssertSize(t, 0)
			if files, _ := filepath.Glob(filepath.Join(out, "data", "*")); len(files) > 0 {
				t.Errorf("merge left %v", files)
			}
		})
	}
	// A v1 file already in the output directory is refused too.
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(filepath.Join(out, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(v1File)
	if err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(out, "data", "part-00000.parquet")
	if err := os.WriteFile(existing, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Merge(context.Background(), []string{v2}, out, MergeOptions{Force: true})
	if want := existing + " has schema version 1 but " + v2File; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Merge into a v1 directory = %v, want %q", err, want)
	}
}

// The fixture is what it says: schema version 1, recorded and by its
// columns.
func TestV1Fixture(t *testing.T) {
	f, err := openFile(v1File, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if f.version != schema.VersionV1 || f.meta[schema.MetadataKey] != "1" {
		t.Errorf("version %q, metadata %v", f.version, f.meta)
	}
}
