package analyze

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// Each file's rows are priced at the prices it records (schema.KeyPrice):
// two runs at different prices, and one without a price, in one directory.
func TestStatsCostPerFilePrice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p1 := `{"input_per_mtok":2,"cached_input_per_mtok":1,"output_per_mtok":8}`
	p2 := `{"input_per_mtok":3,"output_per_mtok":12}`
	opts := func(price string) pqsink.Options {
		o := pqsink.Options{FileRows: 1 << 20}
		if price != "" {
			o.Metadata = map[string]string{schema.KeyPrice: price}
		}
		return o
	}
	withMetrics := func(gs []*pipeline.Group) []*pipeline.Group {
		for _, g := range gs {
			for _, r := range g.Rollouts {
				r.PromptTokens = 100 + int(r.Seed%50)
				r.Metrics = map[string]float64{pipeline.MetricCachedPromptTokens: float64(r.Seed % 40), pipeline.MetricDiscardedCompletionTokens: float64(r.Seed % 3)}
			}
		}
		return gs
	}
	a := writeRun(t, dir, withMetrics(groups("a", 0, 10)), 16, opts(p1))
	b := writeRun(t, dir, withMetrics(groups("b", 10, 20)), 16, opts(p2))
	writeRun(t, dir, withMetrics(groups("c", 20, 25)), 16, opts(""))
	want, rows := 0.0, 0
	for _, set := range []struct {
		rs              []*pipeline.Rollout
		in, cached, out float64
	}{{a, 2, 1, 8}, {b, 3, 3, 12}} {
		for _, r := range set.rs {
			cached := float64(r.Seed % 40)
			want += ((float64(r.PromptTokens)-cached)*set.in + cached*set.cached + (float64(r.CompletionTokens)+float64(r.Seed%3))*set.out) / 1e6
			rows++
		}
	}
	m, err := Stats(context.Background(), []string{dir}, nil, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Cost == nil || math.Abs(m.Cost.Total-want) > 1e-9 || m.Cost.PricedRows != int64(rows) {
		t.Fatalf("cost %+v, want %v over %d priced rows", m.Cost, want, rows)
	}
	// No price anywhere: no cost.
	plain := filepath.Join(t.TempDir(), "data")
	writeRun(t, plain, groups("d", 0, 3), 16, opts(""))
	if m, err := Stats(context.Background(), []string{plain}, nil, StatsOptions{}); err != nil || m.Cost != nil {
		t.Fatalf("unpriced rows: cost %+v, %v", m.Cost, err)
	}
}
