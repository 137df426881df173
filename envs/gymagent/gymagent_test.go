package gymagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/gymagent"
	"github.com/trajflow/trajflow/internal/gymcontract"
	"github.com/trajflow/trajflow/pipeline"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]any
		want string // "" : valid
	}{
		{"ok", map[string]any{"agents": map[string]any{"a": "http://127.0.0.1:9001"}}, ""},
		{"all options", map[string]any{"agents": map[string]any{"a": "http://h:1", "b": "https://h:2/x"}, "agent_name": "b", "request_timeout": "30s", "max_attempts": 5, "retry_delay": "1s"}, ""},
		{"no agents", map[string]any{}, "env.agents: required"},
		{"not a URL", map[string]any{"agents": map[string]any{"a": "127.0.0.1:9001"}}, `env.agents.a: parse`},
		{"not http", map[string]any{"agents": map[string]any{"a": "ftp://h/x"}}, `env.agents.a: "ftp://h/x" is not an http(s) URL`},
		{"unknown agent_name", map[string]any{"agents": map[string]any{"a": "http://h:1"}, "agent_name": "b"}, `env.agent_name: "b" is not one of agents (a)`},
		{"negative attempts", map[string]any{"agents": map[string]any{"a": "http://h:1"}, "max_attempts": -1}, "env.max_attempts: must be at least 1"},
		{"negative timeout", map[string]any{"agents": map[string]any{"a": "http://h:1"}, "request_timeout": "-1s"}, "env.request_timeout: must not be negative"},
		{"unknown key", map[string]any{"agents": map[string]any{"a": "http://h:1"}, "url": "http://h"}, "env.url: unknown option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envs.New(gymagent.Name, envs.Options{Section: "env", Values: tt.opts})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func rollout(raw string, task int64, rollout int) *pipeline.Rollout {
	return &pipeline.Rollout{Task: &pipeline.Task{Index: task, Source: fmt.Sprintf("t.jsonl:%d", task+1), Raw: json.RawMessage(raw)}, RolloutIndex: rollout, Env: gymagent.Name, Seed: 7}
}

const row = `{"responses_create_params":{"input":[{"role":"user","content":"What is 3 + 4?"}],"metadata":{"user_tag":"x"},"temperature":0.5},"agent_ref":{"name":"bank"},"expected_answer":"7"}`

// TestRunRequest: the body posted to /run is the row as Gym's collection
// prepares it (the config's parameters laid over responses_create_params,
// the seed in metadata.extra_body with add_seed, _ng_task_index,
// _ng_rollout_index), with the session id in
// responses_create_params.metadata.trajflow_session beside the row's own
// metadata; it validates as Gym's BaseRunRequest. Rows the env cannot
// send are refused, naming the field.
func TestRunRequest(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	e, err := gymagent.New(gymagent.Config{Agents: map[string]string{"bank": "http://h:1", "other": "http://h:2"}})
	if err != nil {
		t.Fatal(err)
	}
	r := rollout(row, 3, 1)
	r.GymSeed = true
	r.ConfigParams = map[string]any{"max_tokens": 64}
	agent, body, err := e.RunRequest(r, "abc")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(body)
	if err := models.Validate("BaseRunRequest", b); err != nil {
		t.Fatalf("not Gym's run request: %v\n%s", err, b)
	}
	rcp := body["responses_create_params"].(map[string]any)
	md := rcp["metadata"].(map[string]any)
	if agent != "bank" || md["trajflow_session"] != "abc" || md["user_tag"] != "x" || md["extra_body"] != `{"seed":7}` ||
		rcp["max_output_tokens"] != 64 || rcp["temperature"] == nil || body["_ng_task_index"] != int64(3) || body["_ng_rollout_index"] != 1 {
		t.Fatalf("agent %s, body %s", agent, b)
	}
	// The task's row is not changed.
	if strings.Contains(string(r.Task.Raw), "trajflow_session") {
		t.Fatal("the row was changed")
	}

	bad := []struct {
		name, raw, agentName, want string
	}{
		{"plain row", `{"question":"What is 3 + 4?"}`, "", "no responses_create_params object"},
		{"no agent_ref", `{"responses_create_params":{"input":"hi"}}`, "", "no agent_ref, and env.agent_name is not set"},
		{"unknown agent", `{"responses_create_params":{"input":"hi"},"agent_ref":{"name":"nope"}}`, "", `agent_ref.name "nope" is not one of env.agents (bank, other)`},
		{"agent_ref without a name", `{"responses_create_params":{"input":"hi"},"agent_ref":{}}`, "", "agent_ref.name: missing"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := e.RunRequest(rollout(tt.raw, 0, 0), "abc"); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
	// agent_name gives rows without agent_ref their agent, as Gym's +agent_name.
	e2, _ := gymagent.New(gymagent.Config{Agents: map[string]string{"bank": "http://h:1"}, AgentName: "bank"})
	if agent, body, err := e2.RunRequest(rollout(`{"responses_create_params":{"input":"hi"}}`, 0, 0), "s"); err != nil || agent != "bank" || fmt.Sprint(body["agent_ref"]) != "map[name:bank]" {
		t.Fatalf("agent %q body %v err %v", agent, body, err)
	}
}

// agentServer answers /run with a verify answer (reward and extra
// fields) and /aggregate_metrics with Gym's shape, recording bodies.
type agentServer struct {
	mu     sync.Mutex
	runs   []map[string]any
	aggs   []map[string]any
	status int
	answer string
}

func (a *agentServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.URL.Path {
	case "/run":
		a.runs = append(a.runs, body)
		if a.status != 0 {
			w.WriteHeader(a.status)
			fmt.Fprint(w, `{"detail":"boom"}`)
			return
		}
		if a.answer != "" {
			fmt.Fprint(w, a.answer)
			return
		}
		ans := map[string]any{}
		for k, v := range body {
			ans[k] = v
		}
		ans["response"] = map[string]any{"usage": map[string]any{"input_tokens": 3}, "output": []any{}}
		ans["reward"] = 0.75
		ans["judge_passed"] = true
		ans["extracted"] = "7"
		ans["reward_components"] = map[string]any{"format": 0.5}
		_ = json.NewEncoder(w).Encode(ans)
	case "/aggregate_metrics":
		a.aggs = append(a.aggs, body)
		fmt.Fprintf(w, `{"agent_metrics":{"n":%d},"key_metrics":{},"group_level_metrics":[]}`, len(body["verify_responses"].([]any)))
	}
}

func session(id string) envs.Session {
	return envs.Session{ID: id, Calls: func() int { return 1 }, End: func() {}}
}

// TestRun: Run posts the row to its agent's /run and scores the rollout
// with the answer: the reward, the new numeric and boolean fields as
// metrics (reward_components.NAME too); Finish posts the stripped answers,
// sorted, to /aggregate_metrics of each agent that ran rows.
func TestRun(t *testing.T) {
	a, b := &agentServer{}, &agentServer{}
	sa, sb := httptest.NewServer(a), httptest.NewServer(b)
	defer sa.Close()
	defer sb.Close()
	e, err := gymagent.New(gymagent.Config{Agents: map[string]string{"bank": sa.URL, "other": sb.URL}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 2; i >= 0; i-- {
		st, err := e.Run(ctx, rollout(row, int64(i), 0), session(fmt.Sprint("s", i)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Reward != 0.75 || !st.Terminated || st.Metrics["judge_passed"] != 1 || st.Metrics["reward_components.format"] != 0.5 || len(st.Metrics) != 2 {
			t.Fatalf("step %+v", st)
		}
	}
	if len(a.runs) != 3 || len(b.runs) != 0 {
		t.Fatalf("runs: bank %d, other %d", len(a.runs), len(b.runs))
	}
	if md := a.runs[0]["responses_create_params"].(map[string]any)["metadata"].(map[string]any); md["trajflow_session"] != "s2" {
		t.Fatalf("metadata %v", md)
	}
	res, err := e.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"agent_metrics":{"n":3},"group_level_metrics":[],"key_metrics":{}}` {
		t.Fatalf("finish %s", res)
	}
	vr := a.aggs[0]["verify_responses"].([]any)
	for i, v := range vr {
		m := v.(map[string]any)
		if m["_ng_task_index"] != float64(i) || m["responses_create_params"] != nil || fmt.Sprint(m["response"]) != "map[usage:map[input_tokens:3]]" || m["agent_ref"] == nil {
			t.Fatalf("aggregate row %d: %v", i, m)
		}
	}
}

// TestRunFailures: an agent's failure is the rollout's error, naming the
// agent's URL; an answer without a numeric reward is of class
// agent_reward; a connection that cannot be made is tried max_attempts
// times.
func TestRunFailures(t *testing.T) {
	ctx := context.Background()
	a := &agentServer{status: 500}
	sa := httptest.NewServer(a)
	defer sa.Close()
	e, _ := gymagent.New(gymagent.Config{Agents: map[string]string{"bank": sa.URL}})
	if _, err := e.Run(ctx, rollout(row, 0, 0), session("s")); err == nil || !strings.Contains(err.Error(), sa.URL+"/run: HTTP 500") {
		t.Fatalf("err %v", err)
	}
	a.status, a.answer = 0, `{"reward":"high"}`
	_, err := e.Run(ctx, rollout(row, 0, 0), session("s"))
	var ce *envs.ClassedError
	if !errors.As(err, &ce) || ce.Class != envs.ClassAgentReward {
		t.Fatalf("err %v", err)
	}
	if len(a.runs) != 2 {
		t.Fatalf("%d posts, want 2 (an answered /run is never posted again)", len(a.runs))
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	e, _ = gymagent.New(gymagent.Config{Agents: map[string]string{"bank": dead}, MaxAttempts: 2, RetryDelay: pipeline.Duration(1)})
	if _, err := e.Run(ctx, rollout(row, 0, 0), session("s")); err == nil || !strings.Contains(err.Error(), "(try 2)") {
		t.Fatalf("err %v", err)
	}
}
