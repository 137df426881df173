package runstats

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
)

// key_metrics holds mean_gen_tokens_per_sample where some row's
// training-view counts are known, and leaves it out where none is (no
// token ids): never a 0 that looks like a count.
func TestAggregateMetricsUnknownGenTokens(t *testing.T) {
	tests := []struct {
		name    string
		missing bool
		want    bool
	}{
		{"known", false, true},
		{"unknown", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := metrics.New()
			a.Add(&pipeline.Rollout{Task: &pipeline.Task{}, Env: "math", Status: pipeline.StatusOK, NumTurns: 1,
				CompletionTokens: 4, PromptTokenIDs: []int32{1}, ResponseTokenIDs: []int32{2, 3}, LossMask: []int8{1, 1},
				TokenIDsMissing: tt.missing})
			path := filepath.Join(t.TempDir(), "agg.json")
			if err := writeAggregateMetrics(path, a.Result()); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var out []struct {
				KeyMetrics map[string]float64 `json:"key_metrics"`
			}
			if err := json.Unmarshal(data, &out); err != nil || len(out) != 1 {
				t.Fatalf("%v: %s", err, data)
			}
			v, ok := out[0].KeyMetrics["mean_gen_tokens_per_sample"]
			if ok != tt.want || ok && v != 2 {
				t.Errorf("key_metrics mean_gen_tokens_per_sample = %v (present %v); want present %v", v, ok, tt.want)
			}
		})
	}
}
