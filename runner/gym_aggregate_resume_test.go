package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs/httpenv"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestGymAggregateMetricsAfterResume: a resumed run posts to
// /aggregate_metrics only the rollouts it ran itself, not those an earlier
// run committed (NeMo Gym's resume sends every result of the output file),
// and aggregate_metrics.json holds that answer.
func TestGymAggregateMetricsAfterResume(t *testing.T) {
	var posted atomic.Int64 // verify_responses in the last /aggregate_metrics
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		switch r.URL.Path {
		case "/seed_session":
			fmt.Fprint(w, `{}`)
		case "/verify":
			fmt.Fprint(w, `{"reward": 1}`)
		case "/aggregate_metrics":
			n := len(body["verify_responses"].([]any))
			posted.Store(int64(n))
			fmt.Fprintf(w, `{"agent_metrics": {"n": %d}, "key_metrics": {}, "group_level_metrics": []}`, n)
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	var lines strings.Builder
	for i := range 8 {
		fmt.Fprintf(&lines, `{"responses_create_params":{"input":"Say %d."}}`+"\n", i)
	}
	os.WriteFile(tasks, []byte(lines.String()), 0o644)
	out := filepath.Join(dir, "out")
	cfg, err := config.Parse([]byte(`
source: {path: `+tasks+`}
repeat: {n: 2, seed: 1}
generate: {endpoints: ["sim://"], model: sim, params: {max_tokens: 4}}
env: {name: bank}
output: {dir: `+out+`, batch_rows: 4, file_rows: 4}
run: {progress: 0}
`), "gym.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	runOnce := func() int64 {
		env, err := httpenv.New(httpenv.Config{URL: srv.URL, Protocol: httpenv.ProtocolNeMoGym})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return sum.OK
	}
	if ok := runOnce(); ok != 16 || posted.Load() != 16 {
		t.Fatalf("first run: %d rows, %d posted, want 16 and 16", ok, posted.Load())
	}
	paths, _ := filepath.Glob(filepath.Join(out, schema.DataDir, "part-*.parquet"))
	for _, p := range paths[len(paths)/2:] {
		os.Remove(p)
	}
	redone := runOnce()
	if redone == 0 || redone >= 16 || posted.Load() != redone {
		t.Fatalf("resumed run redid %d rollouts and posted %d, want the redone ones only", redone, posted.Load())
	}
	b, err := os.ReadFile(filepath.Join(out, schema.ServerAggregateMetricsFile))
	if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"n": %d`, redone)) {
		t.Fatalf("aggregate_metrics.json %s, %v", b, err)
	}
}
