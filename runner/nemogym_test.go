package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs/httpenv"
	"github.com/trajflow/trajflow/internal/gymcontract"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// A run against a NeMo Gym-shaped resources server on the simulator with a
// small max_tokens: cut replies reach /verify as incomplete, the server's
// aggregate metrics land in OUTPUT/aggregate_metrics.json, and the JSONL
// output says the same as what /verify got. The server validates every
// body with Gym's models (extra keys forbidden in responses_create_params,
// internal/gymcontract): with repeat.seed set, none is refused, and every
// JSONL line validates as Gym's verify answer.
func TestNeMoGymRunOnTheSimulator(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	verifies := map[string]map[string]any{} // "task/rollout" -> body
	gate, rejected := models.Gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(b, &body)
		switch r.URL.Path {
		case "/seed_session":
			fmt.Fprint(w, `{}`)
		case "/verify":
			mu.Lock()
			verifies[fmt.Sprint(body["_ng_task_index"], "/", body["_ng_rollout_index"])] = body
			mu.Unlock()
			fmt.Fprint(w, `{"reward": 0.5, "cut": 1}`)
		case "/aggregate_metrics":
			n := len(body["verify_responses"].([]any))
			fmt.Fprintf(w, `{"agent_metrics": {"n": %d}, "key_metrics": {}, "group_level_metrics": []}`, n)
		default:
			w.WriteHeader(404)
		}
	}))
	srv := httptest.NewServer(gate)
	defer srv.Close()
	env, err := httpenv.New(httpenv.Config{URL: srv.URL, Protocol: httpenv.ProtocolNeMoGym})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"responses_create_params":{"input":"Count from one to twenty in words."},"expected_answer":"x"}
{"responses_create_params":{"input":[{"role":"user","content":"Write a long story."}],"instructions":"Be verbose."}}
`), 0o644)
	out := filepath.Join(dir, "out")
	cfg, err := config.Parse([]byte(`
source: {path: `+tasks+`}
repeat: {n: 2, seed: 1}
generate: {endpoints: ["sim://"], model: sim, params: {max_tokens: 2}}
env: {name: bank}
output: {dir: `+out+`, jsonl: true}
run: {progress: 0}
`), "gym.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: env})
	for _, err := range rejected.Errors() {
		t.Errorf("the resources server refused a body: %v", err)
	}
	if err != nil || sum.OK != 4 {
		t.Fatalf("run: %v, summary %+v", err, sum)
	}
	if len(verifies) != 4 {
		t.Fatalf("%d verifies, want 4", len(verifies))
	}
	files, _ := filepath.Glob(filepath.Join(out, "jsonl", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("jsonl files %v", files)
	}
	f, _ := os.Open(files[0])
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	incomplete := 0
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if err := models.Validate("BaseVerifyResponse", sc.Bytes()); err != nil {
			t.Errorf("a JSONL line does not validate with Gym's models: %v", err)
		}
		key := fmt.Sprint(line["_ng_task_index"], "/", line["_ng_rollout_index"])
		v := verifies[key]
		vr, lr := v["response"].(map[string]any), line["response"].(map[string]any)
		tf := line["trajflow"].(map[string]any)
		cut := tf["finish_reason"] == "length"
		if cut {
			incomplete++
		}
		if (vr["status"] == "incomplete") != cut || vr["status"] != lr["status"] || fmt.Sprint(vr["incomplete_details"]) != fmt.Sprint(lr["incomplete_details"]) {
			t.Errorf("%s: finish_reason %v, verify got status %v %v, the line has %v %v", key, tf["finish_reason"], vr["status"], vr["incomplete_details"], lr["status"], lr["incomplete_details"])
		}
		if fmt.Sprint(v["responses_create_params"]) != fmt.Sprint(line["responses_create_params"]) {
			t.Errorf("%s: responses_create_params: verify %v, line %v", key, v["responses_create_params"], line["responses_create_params"])
		}
		if line["reward"] != 0.5 || tf["metrics"].(map[string]any)["cut"] != 1.0 {
			t.Errorf("%s: reward %v metrics %v", key, line["reward"], tf["metrics"])
		}
	}
	if incomplete == 0 {
		t.Fatal("no reply was cut: max_tokens 2 should cut the simulator's replies")
	}
	b, err := os.ReadFile(filepath.Join(out, schema.ServerAggregateMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var agg []map[string]any
	if err := json.Unmarshal(b, &agg); err != nil || len(agg) != 1 || fmt.Sprint(agg[0]["agent_ref"]) != "map[name:bank]" || fmt.Sprint(agg[0]["agent_metrics"]) != "map[n:4]" {
		t.Fatalf("aggregate_metrics.json = %s (%v)", b, err)
	}
}

// TestNeMoGymExampleParams runs examples/nemo-gym (repeat.add_seed on) with a temperature
// override and repeat.seed, writing Gym-shaped JSONL: every line's
// responses_create_params is the row's, with the config's parameters laid
// over it (temperature replacing the row's own, max_tokens as
// max_output_tokens) and, with repeat.add_seed, the rollout's seed in
// metadata.extra_body, as Gym's rollout collection writes them with
// num_repeats_add_seed; every line has agent_ref.
func TestNeMoGymExampleParams(t *testing.T) {
	cfg := nemoGym(t, "generate.params.temperature=0.25", "repeat.seed=0", "output.jsonl=true")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := map[int64]map[string]any{}
	root, _ := filepath.Abs("..")
	b, err := os.ReadFile(filepath.Join(root, "examples/nemo-gym/tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var row map[string]any
		if err := json.Unmarshal(l, &row); err != nil {
			t.Fatal(err)
		}
		rows[int64(i)] = row
	}
	files, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.JSONLDir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("jsonl files %v", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n, rowTemps := 0, 0
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		n++
		ti := int64(line["_ng_task_index"].(float64))
		ri := line["_ng_rollout_index"].(float64)
		// Gym: row[rcp] | overrides, then metadata.extra_body's seed =
		// the rollout index.
		want := map[string]any{}
		for k, v := range rows[ti]["responses_create_params"].(map[string]any) {
			want[k] = v
		}
		if _, ok := want["temperature"]; ok {
			rowTemps++
		}
		want["temperature"] = 0.25
		want["max_output_tokens"] = 64.0
		want["metadata"] = map[string]any{"extra_body": fmt.Sprintf(`{"seed":%v}`, ri)}
		got, _ := json.Marshal(line["responses_create_params"])
		w, _ := json.Marshal(want)
		if string(got) != string(w) {
			t.Errorf("task %d rollout %v: responses_create_params %s, want %s", ti, ri, got, w)
		}
		if ref, ok := line["agent_ref"].(map[string]any); !ok || ref["name"] == nil {
			t.Errorf("task %d rollout %v: agent_ref %v", ti, ri, line["agent_ref"])
		}
	}
	if n != 4*len(rows) || rowTemps == 0 {
		t.Fatalf("%d lines for %d rows, %d with a row temperature the override replaced", n, len(rows), rowTemps)
	}
}

// TestNeMoGymAggregateMetricsFailureFailsTheRun: a resources server whose
// /aggregate_metrics fails fails the run, as Gym's rollout collection
// fails on it; the rows are committed all the same.
func TestNeMoGymAggregateMetricsFailureFailsTheRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/seed_session":
			fmt.Fprint(w, `{}`)
		case "/verify":
			fmt.Fprint(w, `{"reward": 1}`)
		default:
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	env, err := httpenv.New(httpenv.Config{URL: srv.URL, Protocol: httpenv.ProtocolNeMoGym})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"responses_create_params":{"input":"Say hi."}}`+"\n"), 0o644)
	out := filepath.Join(dir, "out")
	cfg, err := config.Parse([]byte(`
source: {path: `+tasks+`}
repeat: {n: 2}
generate: {endpoints: ["sim://"], model: sim}
env: {name: bank}
output: {dir: `+out+`}
run: {progress: 0}
`), "gym.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: env, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "aggregate metrics") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("run: %v, want the failed /aggregate_metrics", err)
	}
	if sum == nil || sum.OK != 2 || len(readBack(t, out, schema.DataDir)) != 2 {
		t.Fatalf("summary %+v: the rows are not committed", sum)
	}
}
