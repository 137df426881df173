package analyze

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/runner/metrics"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// Aggregate returns the aggregator Stats reads its metrics from: the same
// Result, and the tasks by (n, c) of an aggregator fed the rows directly,
// whether the rows of a task are contiguous (data/ alone) or not (data/
// and a second directory holding later attempts of the same tasks).
func TestAggregateTaskOutcomes(t *testing.T) {
	dir := t.TempDir()
	rs := writeRun(t, filepath.Join(dir, "data"), groups("run-a", 0, 12), 16, pqsink.Options{FileRows: 20})
	later := groups("run-a", 0, 12)
	for _, g := range later {
		for _, r := range g.Rollouts {
			r.Attempt++
		}
		g.Key.Attempt++
	}
	more := writeRun(t, filepath.Join(dir, "more"), later, 16, pqsink.Options{})
	tests := []struct {
		name  string
		paths []string
		rows  int
	}{
		{"contiguous", []string{dir}, len(rs)},
		{"spread", []string{dir, filepath.Join(dir, "more")}, len(rs) + len(more)},
	}
	for _, tt := range tests {
		want := metrics.New()
		for _, r := range append(rs, more...)[:tt.rows] {
			want.Add(r)
		}
		agg, err := Aggregate(context.Background(), tt.paths, StatsOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := agg.TaskOutcomes(); len(got) == 0 || !reflect.DeepEqual(got, want.TaskOutcomes()) {
			t.Errorf("%s: TaskOutcomes = %+v, want %+v", tt.name, got, want.TaskOutcomes())
		}
		m, err := Stats(context.Background(), tt.paths, nil, StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(agg.Result(), m) {
			t.Errorf("%s: Aggregate's Result differs from Stats", tt.name)
		}
	}
}
