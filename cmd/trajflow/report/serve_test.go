package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
)

// An output served by trajflow serve gets its drift over steps, split by
// lag, and its evaluations by policy version; an output not served gets
// neither chart.
func TestReportServed(t *testing.T) {
	dir := t.TempDir()
	writeOutput(t, dir, 8)
	if html := buildReport(t, Inputs(dir), Options{Served: dir}); strings.Contains(html, `id="chart_drift"`) || strings.Contains(html, `id="chart_eval"`) {
		t.Fatal("drift or evaluation charts for an output not served")
	}
	acc := func(tokens int64, sumAbs float64) *client.DriftSums {
		return &client.DriftSums{Tokens: tokens, SumAbs: sumAbs, MaxAbs: sumAbs}
	}
	rec := func(lag0, lag1 *client.DriftSums) *client.StepDriftRecord {
		d := &client.StepDriftRecord{Trainer: 3, Ratio: 2, ByLag: map[string]*client.DriftSums{"0": lag0, "1": lag1}}
		d.All.Merge(lag0)
		d.All.Merge(lag1)
		return d
	}
	state := map[string]any{"steps": []map[string]any{
		{"step": 2, "drift": rec(acc(10, 0.5), acc(10, 2.5))},
		{"step": 1, "drift": rec(acc(4, 0.4), acc(1, 0.7))},
		{"step": 3},
	}}
	b, _ := json.Marshal(state)
	if err := os.MkdirAll(filepath.Join(dir, schema.ServedDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, schema.ServedDir, schema.ServeStateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, r := range []client.EvalResult{{Version: 2, PassAt1: 0.25, K: 4, PassAtK: 0.5, MeanReward: 0.3}, {Version: 4, PassAt1: 0.375, K: 4, PassAtK: 0.625, MeanReward: 0.4}} {
		d := filepath.Join(dir, schema.EvalDir, "v-00000"+string(rune('0'+r.Version)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(d, "eval.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	html := buildReport(t, Inputs(dir), Options{Served: dir})
	for _, want := range []string{
		`id="chart_drift"`, `id="chart_eval"`, "2 steps", "pass@4",
		// Steps in order (1, then 2): all tokens 1.1/5 = 0.22 then 3/20 =
		// 0.15; lag 0: 0.1, 0.05; lag 1: 0.7, 0.25.
		`"name":"all tokens","type":"line","data":[{"value":0.22},{"value":0.15}]`,
		`"name":"1 versions behind","type":"line","data":[{"value":0.7},{"value":0.25}]`,
		`"name":"pass@1","type":"line","data":[{"value":0.25},{"value":0.375}]`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
