package report

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/runner/analyze"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// A file another writer made with rewards that are not finite (or too
// large to square) still gives a report, and stats: the moments leave
// them out and count them.
func TestReportOnNonFiniteRewards(t *testing.T) {
	dir := t.TempDir()
	w, err := pqsink.New(filepath.Join(dir, "data"), pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := collate.New(memory.DefaultAllocator, 1000)
	defer c.Release()
	g := pipelinetest.Group(0, 4, 100)
	for i, v := range []float64{math.NaN(), math.Inf(1), 1.7e308, 0.5} {
		g.Rollouts[i].Reward = v
		g.Rollouts[i].TurnRewards = []float64{v}
	}
	c.Add(g)
	rec := c.Flush()
	if err := w.Write(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var js strings.Builder
	m, err := analyze.Stats(context.Background(), []string{dir}, &js, analyze.StatsOptions{JSON: true})
	if err != nil || m.RewardsSkipped < 2 || m.RewardsSkipped+m.Reward.N != m.ScoredRows || !strings.Contains(js.String(), `"rewards_skipped": `) {
		t.Fatalf("stats: %v, %+v", err, m)
	}
	html := buildReport(t, []string{dir}, Options{})
	if !strings.Contains(html, "<th>rows</th><td class=\"n\">4</td>") {
		t.Errorf("the report does not count the 4 rows")
	}
}
