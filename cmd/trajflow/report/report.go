package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner/analyze"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/schema/shards"
)

// Defaults of Options.
const (
	DefaultSamples   = 24
	DefaultMaxTokens = 4096
)

// Options configure a report.
type Options struct {
	// Title heads the page. Default: "trajflow report: " and the inputs.
	Title string
	// Correctness chooses what counts as a correct sample, as for
	// `trajflow stats`.
	Correctness metrics.Options
	// Samples is the most trajectories the page shows. Default
	// DefaultSamples; negative: none.
	Samples int
	// MaxTokens is the most token ids the token view of one trajectory
	// shows. Default DefaultMaxTokens.
	MaxTokens int
	// Allocator allocates the read buffers. Default memory.DefaultAllocator.
	Allocator memory.Allocator
	// BatchRows is the number of rows per record batch of the light
	// passes. Default analyze.DefaultBatchRows.
	BatchRows int
	// Now stamps the page. Default time.Now.
	Now func() time.Time
	// Also are inputs (an output's filtered/ and errors/ folders, see
	// Also) whose rows enter the charts, which show every row, but not
	// the summary table, which is what `trajflow stats` gives on the
	// paths themselves.
	Also []string
	// Failures are failures.jsonl logs whose lines the summary counts by
	// error class (a missing file is skipped).
	Failures []string
	// RunMetrics is a metrics.json whose last_run token figures (the
	// requests cancelled in flight, the servers' own count) the summary
	// shows; "" or a missing file: none.
	RunMetrics string
	// Served is an output directory `trajflow serve` served: the drift of
	// its steps (served/state.json) and its evaluations (eval/) get a
	// chart each; "" or an output with neither: none.
	Served string
}

func (o Options) withDefaults(paths []string) Options {
	if o.Title == "" {
		o.Title = "trajflow report: " + filepath.Join(paths[0])
		if len(paths) > 1 {
			o.Title += fmt.Sprintf(" and %d more", len(paths)-1)
		}
	}
	if o.Samples == 0 {
		o.Samples = DefaultSamples
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Allocator == nil {
		o.Allocator = memory.DefaultAllocator
	}
	if o.BatchRows <= 0 {
		o.BatchRows = analyze.DefaultBatchRows
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Inputs returns output and Also(output): every path a report of output
// reads, for a report whose summary counts them all.
func Inputs(output string) []string {
	return append([]string{output}, Also(output)...)
}

// Also returns the folders beside an output directory's data that a
// report's charts read (Options.Also): its filtered/ directory (a run
// with output.filtered: true), so that keep rates count the dropped
// groups, and its errors/ directory, so that errors are shown; for a
// sharded run's root, each shard's.
func Also(output string) []string {
	var paths []string
	dirs := []string{output}
	// A sharded run's root: each shard's filtered groups too.
	if set, ok, err := shards.Scan(output); err == nil && ok {
		dirs = nil
		for _, sh := range set.Shards {
			dirs = append(dirs, sh.Dir)
		}
	}
	for _, sub := range []string{schema.FilteredDir, schema.ErrorsDir} {
		for _, d := range dirs {
			dir := filepath.Join(d, sub)
			if files, err := filepath.Glob(filepath.Join(dir, "*.parquet")); err == nil && len(files) > 0 {
				paths = append(paths, dir)
			}
		}
	}
	return paths
}

// FailureLogs returns the failures.jsonl logs of an output directory (for
// a sharded run's root, each shard's) for Options.Failures.
func FailureLogs(output string) []string {
	dirs := []string{output}
	if set, ok, err := shards.Scan(output); err == nil && ok {
		dirs = nil
		for _, sh := range set.Shards {
			dirs = append(dirs, sh.Dir)
		}
	}
	var out []string
	for _, d := range dirs {
		out = append(out, filepath.Join(d, schema.FailuresFile))
	}
	return out
}

// Write writes the report of the rows in paths (output directories or
// Parquet files, as analyze.ResolveFiles resolves them) to w.
func Write(ctx context.Context, paths []string, w io.Writer, opts Options) error {
	if len(paths) == 0 {
		return errors.New("report: no input paths")
	}
	opts = opts.withDefaults(paths)
	sopts := analyze.StatsOptions{Correctness: opts.Correctness, Allocator: opts.Allocator, BatchRows: opts.BatchRows}
	// The summary: what `trajflow stats` gives on paths.
	statsAgg, err := analyze.Aggregate(ctx, paths, sopts)
	if err != nil {
		return err
	}
	stats := statsAgg.Result()
	files, err := analyze.ResolveFiles(append(slices.Clone(paths), opts.Also...))
	if err != nil {
		return err
	}
	agg, m := statsAgg, stats
	if len(opts.Also) > 0 {
		// The charts: every row, the dropped groups' and errors' too.
		if agg, err = analyze.Aggregate(ctx, files, sopts); err != nil {
			return err
		}
		m = agg.Result()
	}
	failures, err := readFailures(opts.Failures)
	if err != nil {
		return err
	}
	lastRun, err := readLastRun(opts.RunMetrics)
	if err != nil {
		return err
	}
	c := newCollector(m, opts)
	for i, path := range files {
		if err := c.file(ctx, i, path, opts); err != nil {
			return err
		}
	}
	samples, err := readSamples(ctx, files, c.chosen(), opts)
	if err != nil {
		return err
	}
	var sv *served
	if opts.Served != "" {
		if sv, err = readServed(opts.Served); err != nil {
			return err
		}
	}
	p := &page{
		served:   sv,
		Title:    opts.Title,
		Inputs:   paths,
		Files:    len(files),
		Created:  opts.Now().UTC().Format(time.RFC3339),
		Metrics:  m,
		Stats:    stats,
		Failures: failures,
		LastRun:  lastRun,
		outcomes: agg.TaskOutcomes(),
		c:        c,
		Samples:  samples,
	}
	return p.render(w)
}

// WriteFile writes the report to path atomically (durable.File: a
// temporary file in the same directory, synced, renamed over path, the
// directory synced). A report replaced keeps its mode; a new one is 0644.
func WriteFile(ctx context.Context, paths []string, path string, opts Options) error {
	f, err := durable.Create(path, 0o644)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := Write(ctx, paths, f, opts); err != nil {
		return errors.Join(err, f.Abort())
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
