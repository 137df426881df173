package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestNeMoRLTokenMeans: with generate.api: tokens and
// env.observation_tokens: raw, metrics.json's token means are NeMo RL's,
// recomputed here from the rows as its rollout counts them: per sample,
// the generated ids of every turn (len(generated_ids), the server's
// completion) and every environment observation's text tokenised alone
// (tokenizer(content, add_special_tokens=False)); the total is their sum;
// each mean is over every sample.
func TestNeMoRLTokenMeans(t *testing.T) {
	cfg := nemoGym(t, "generate.api=tokens", "env.observation_tokens=raw")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	var n, gen, env float64
	for _, r := range rows {
		if r.Status != pipeline.StatusOK || r.Truncated {
			t.Fatalf("row %s: status %s truncated %v; the recomputation below assumes neither", r.TrajID, r.Status, r.Truncated)
		}
		n++
		gen += float64(r.CompletionTokens)
		for _, m := range r.Messages {
			if m.Turn >= 1 && m.Role != pipeline.RoleAssistant {
				env += float64(len(sim.Tokenize(m.Content)))
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Gen   float64 `json:"mean_gen_tokens_per_sample"`
		Env   float64 `json:"mean_env_tokens_per_sample"`
		Total float64 `json:"mean_total_tokens_per_sample"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if env == 0 {
		t.Fatal("no observation after a reply: too plain a run to test")
	}
	if got.Gen != gen/n || got.Env != env/n || got.Total != (gen+env)/n {
		t.Fatalf("metrics.json gen %v env %v total %v; NeMo RL's counting gives %v %v %v", got.Gen, got.Env, got.Total, gen/n, env/n, (gen+env)/n)
	}
}
