package analyze

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// benchSetup writes a run of 500 tasks × 8 rollouts with ~8 KB of payload
// per row (messages and token ids), in part files of 1024 rows.
func benchSetup(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	var gs []*pipeline.Group
	for t := range int64(500) {
		gs = append(gs, pipelinetest.Group(t, 8, 8<<10))
	}
	writeRun(b, filepath.Join(dir, "data"), gs, 256, pqsink.Options{FileRows: 1024})
	return dir
}

func BenchmarkStats(b *testing.B) {
	dir := benchSetup(b)
	b.ResetTimer()
	for range b.N {
		m, err := Stats(context.Background(), []string{dir}, nil, StatsOptions{})
		if err != nil || m.Rows != 4000 {
			b.Fatal(m, err)
		}
	}
	b.ReportMetric(4000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkStatsAllColumns reads every column and decodes full rollouts:
// what Stats would cost without column selection.
func BenchmarkStatsAllColumns(b *testing.B) {
	dir := benchSetup(b)
	files, err := ResolveFiles([]string{dir})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		agg := metrics.New()
		for _, path := range files {
			f, err := openFile(path, nil, 0)
			if err != nil {
				b.Fatal(err)
			}
			err = f.records(context.Background(), nil, func(rec arrow.Record) error {
				rs, err := schema.Rollouts(rec)
				for _, r := range rs {
					agg.Add(r)
				}
				return err
			})
			f.close()
			if err != nil {
				b.Fatal(err)
			}
		}
		if agg.Result().Rows != 4000 {
			b.Fatal("rows")
		}
	}
	b.ReportMetric(4000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkMerge(b *testing.B) {
	dir := benchSetup(b)
	b.ResetTimer()
	for range b.N {
		out := b.TempDir()
		res, err := Merge(context.Background(), []string{dir}, out, MergeOptions{})
		if err != nil || res.Rows != 4000 {
			b.Fatal(res, err)
		}
	}
	b.ReportMetric(4000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
