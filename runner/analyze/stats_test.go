package analyze

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/runner/metrics"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// Stats over files gives the same metrics as an Aggregator fed the
// rollouts directly, whatever the read batch size.
func TestStatsMatchesAggregator(t *testing.T) {
	dir := t.TempDir()
	rs := writeRun(t, filepath.Join(dir, "data"), groups("run-a", 0, 30), 16, pqsink.Options{FileRows: 40, RowGroupRows: 11})
	if len(parts(t, filepath.Join(dir, "data"))) < 3 {
		t.Fatal("want several part files")
	}
	for _, correctness := range []metrics.Options{{}, {UseReward: true}, {Metric: "len", Threshold: 20}} {
		agg := metrics.NewWithOptions(correctness)
		for _, r := range rs {
			agg.Add(r)
		}
		want := agg.Result()
		if want.Rows != int64(len(rs)) || len(want.AtK) != 4 || want.TasksComplete == 0 || want.Tokens.Completion.Max < 1000 || want.Groups.Dropped == 0 || want.Status["error"] == 0 {
			t.Fatalf("fixture too plain: %+v", want)
		}
		for _, batch := range []int{0, 1, 7, 100} {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			got, err := Stats(context.Background(), []string{dir}, nil,
				StatsOptions{Correctness: correctness, Allocator: alloc, BatchRows: batch})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(want, "", " ")
				t.Errorf("%+v batch %d: Stats\n%s\nAggregator\n%s", correctness, batch, gj, wj)
			}
			alloc.AssertSize(t, 0)
		}
	}
}

func TestStatsOutput(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, filepath.Join(dir, "data"), groups("run-a", 0, 6), 8, pqsink.Options{})
	var buf bytes.Buffer
	m, err := Stats(context.Background(), []string{dir}, &buf, StatsOptions{JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	var back metrics.Metrics
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if !reflect.DeepEqual(&back, m) {
		t.Errorf("JSON output %+v, want %+v", back, *m)
	}

	buf.Reset()
	if _, err := Stats(context.Background(), []string{dir}, &buf, StatsOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rows  ", "pass@k", "completion tokens", "truncation rate"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// Paths: a directory with data/parts, a directory of *.parquet, a file;
// a file named twice is read once.
func TestStatsPaths(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	a := writeRun(t, filepath.Join(run, "data"), groups("run-a", 0, 5), 8, pqsink.Options{FileRows: 8})
	flat := filepath.Join(dir, "flat")
	b := writeRun(t, flat, groups("run-b", 0, 3), 8, pqsink.Options{Prefix: "shard"})
	one := parts(t, filepath.Join(run, "data"))[0]
	m, err := Stats(context.Background(), []string{run, flat, one}, nil, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != int64(len(a)+len(b)) {
		t.Errorf("rows %d, want %d", m.Rows, len(a)+len(b))
	}
	if m.Tasks != 8 {
		t.Errorf("tasks %d, want 5 + 3", m.Tasks)
	}
}

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.parquet")
	if err := os.WriteFile(text, []byte("this is not parquet, just text long enough"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.parquet")
	if err := os.WriteFile(short, []byte("PAR1"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.parquet")
	writeOtherSchema(t, other)
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		path string
		want string
	}{
		{missing, "no such file"},
		{empty, "no Parquet files"},
		{text, "not a readable Parquet file"},
		{short, "not a readable Parquet file"},
		{other, "not in trajflow's output schema"},
	}
	for _, tt := range tests {
		_, err := Stats(context.Background(), []string{tt.path}, nil, StatsOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Stats(%s) = %v, want an error naming it and saying %q", tt.path, err, tt.want)
		}
		_, err = Merge(context.Background(), []string{tt.path}, filepath.Join(dir, "out"), MergeOptions{})
		if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Merge(%s) = %v, want an error naming it and saying %q", tt.path, err, tt.want)
		}
	}
	if _, err := Stats(context.Background(), nil, nil, StatsOptions{}); err == nil {
		t.Error("Stats with no paths succeeded")
	}
}

func TestStatsCancelled(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, filepath.Join(dir, "data"), groups("run-a", 0, 6), 8, pqsink.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Stats(ctx, []string{dir}, nil, StatsOptions{}); err != context.Canceled {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// Files whose tasks interleave (a task's attempts in two directories, read
// one after the other) give the same metrics as an Aggregator without
// Options.Contiguous fed the same rows: Stats notices and reads again.
func TestStatsInterleavedTasks(t *testing.T) {
	dir := t.TempDir()
	first := groups("run-a", 0, 12)
	second := groups("run-a", 0, 12)
	for _, g := range second {
		g.Key.Attempt = 1
		for _, r := range g.Rollouts {
			r.Attempt = 1
		}
	}
	rs := writeRun(t, filepath.Join(dir, "data"), first, 16, pqsink.Options{})
	rs = append(rs, writeRun(t, filepath.Join(dir, "filtered"), second, 16, pqsink.Options{})...)

	agg := metrics.New()
	for _, r := range rs {
		agg.Add(r)
	}
	want := agg.Result()
	contiguous := metrics.NewWithOptions(metrics.Options{Contiguous: true})
	for _, r := range rs {
		contiguous.Add(r)
	}
	if !errors.Is(contiguous.Err(), metrics.ErrNotContiguous) {
		t.Fatalf("fixture does not interleave: %v", contiguous.Err())
	}
	if want.Tasks != 12 || want.Groups.Count <= 12 {
		t.Fatalf("fixture: %d tasks, %d groups", want.Tasks, want.Groups.Count)
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	got, err := Stats(context.Background(), []string{dir, filepath.Join(dir, "filtered")}, nil, StatsOptions{Allocator: alloc})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.MarshalIndent(got, "", " ")
		wj, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("Stats\n%s\nAggregator\n%s", gj, wj)
	}
	alloc.AssertSize(t, 0)
}

// Rows whose replies came without token ids have null training-view
// counts: stats leaves them out of the training view's figures and says
// how many, as an Aggregator fed the rollouts does, and still counts the
// servers' usage (completion tokens) of every row.
func TestStatsUnknownTokenCounts(t *testing.T) {
	tests := []struct {
		name    string
		missing func(task int64) bool
		text    []string
	}{
		{"some rows", func(task int64) bool { return task%2 == 0 }, []string{"rows unknown: no token ids"}},
		{"every row", func(int64) bool { return true }, []string{"gen unknown  env unknown  total unknown", "env tokens         unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			gs := groups("run-a", 0, 8)
			var unknown, completion int64
			for _, g := range gs {
				for _, r := range g.Rollouts {
					if tt.missing(r.Task.Index) {
						r.TokenIDsMissing = true
					}
					if r.TokenIDsMissing { // groups marks some too
						unknown++
					}
					completion += int64(r.CompletionTokens)
				}
			}
			rs := writeRun(t, filepath.Join(dir, "data"), gs, 16, pqsink.Options{})
			agg := metrics.New()
			for _, r := range rs {
				agg.Add(r)
			}
			want := agg.Result()
			var buf bytes.Buffer
			got, err := Stats(context.Background(), []string{dir}, &buf, StatsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(want, "", " ")
				t.Errorf("Stats\n%s\nAggregator\n%s", gj, wj)
			}
			if got.TokenCountsUnknown != unknown || got.Tokens.Completion.Total != completion {
				t.Errorf("token_counts_unknown %d, completion tokens %d; want %d, %d",
					got.TokenCountsUnknown, got.Tokens.Completion.Total, unknown, completion)
			}
			if unknown == got.Rows && (got.MeanGenTokensPerSample != nil || got.Tokens.Env != nil || got.PerTurn[0].GenTokens != nil) {
				t.Errorf("figures of unknown counts are not null: %+v", got.NeMoRL)
			}
			for _, s := range tt.text {
				if !strings.Contains(buf.String(), s) {
					t.Errorf("table lacks %q:\n%s", s, buf.String())
				}
			}
		})
	}
}
