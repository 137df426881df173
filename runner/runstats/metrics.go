package runstats

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/trajflow/trajflow/runner/analyze"
	"github.com/trajflow/trajflow/schema"
)

// WriteMetrics computes the metrics of everything committed in the data
// directory, this run's and earlier runs' alike, into metrics.json and
// its NeMo Gym layout (schema.AggregateMetricsFile).
func (r *Tracker) WriteMetrics(ctx context.Context) error {
	dir := filepath.Join(r.cfg.Output.Dir, schema.DataDir)
	if files, _ := filepath.Glob(filepath.Join(dir, schema.PartGlob)); len(files) == 0 {
		return nil
	}
	m, err := analyze.Stats(ctx, []string{r.cfg.Output.Dir}, nil, analyze.StatsOptions{Allocator: r.in.Alloc})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	m.LastRun = r.runTokens()
	if err := m.WriteFile(filepath.Join(r.cfg.Output.Dir, schema.MetricsFile)); err != nil {
		return err
	}
	return writeAggregateMetrics(filepath.Join(r.cfg.Output.Dir, schema.AggregateMetricsFile), m)
}
