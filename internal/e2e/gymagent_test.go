package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/gymcontract"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// gymTool is the tool of the Gym rows, in the Responses API's form.
const gymTool = `{"type":"function","name":"add","description":"Adds one to the balance.","parameters":{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]},"strict":true}`

// gymChatTools is gymTool in Chat Completions' form, as the model sees it.
var gymChatTools = []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"add","description":"Adds one to the balance.","parameters":{"properties":{"amount":{"type":"integer"}},"required":["amount"],"type":"object"},"strict":true}}`)}

// writeGymTasks writes n Gym rows (responses_create_params.input, tools,
// agent_ref, expected_answer) of arithmetic questions the simulator
// answers.
func writeGymTasks(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		x, y := 3+i, 4+2*i
		fmt.Fprintf(&b, `{"responses_create_params":{"input":[{"role":"user","content":"What is %d + %d? Use the tool if you like."}],"tools":[%s]},"agent_ref":{"name":"arith_agent"},"expected_answer":"%d"}`+"\n", x, y, gymTool, x+y)
	}
	path := filepath.Join(dir, "gym.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func equal64(a []int64, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != int64(b[i]) {
			return false
		}
	}
	return true
}

// freeAddr is a loopback host:port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// gymSetup is a Gym resources server and a Gym simple agent (transcribed
// in gymcontract) whose model server is a trajflow gateway at gateway.
type gymSetup struct {
	models    *gymcontract.Models
	resources *gymcontract.ArithmeticResources
	resURL    string
	agent     *gymcontract.SimpleAgent
	agentURL  string
	gateway   string
}

const gymMaxSteps = 4

func newGymSetup(t *testing.T) *gymSetup {
	t.Helper()
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	g := &gymSetup{models: models, gateway: freeAddr(t)}
	g.resources = gymcontract.NewArithmeticResources(models)
	rs := httptest.NewServer(g.resources)
	t.Cleanup(rs.Close)
	g.resURL = rs.URL
	g.agent = &gymcontract.SimpleAgent{Resources: rs.URL, Model: "http://" + g.gateway, MaxSteps: gymMaxSteps, Models: models}
	as := httptest.NewServer(g.agent)
	t.Cleanup(as.Close)
	g.agentURL = as.URL
	return g
}

// gymConfig writes a run config over tasks: env is the env section.
func gymConfig(t *testing.T, dir, name, tasks, out, env, extra string, timeScale float64) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: e2e-gym-agent, progress: 0}
source: {path: %s}
repeat: {n: 2, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-agent
  api: tokens
  concurrency: 16
  params: {max_tokens: 200}
  sim: {seed: 7, accuracy: 0.6, time_scale: %g}
env: %s
groups: {keep: all}
output: {dir: %s, file_rows: 8, batch_rows: 8, jsonl: true}
%s`, q(tasks), timeScale, env, q(out), extra)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (g *gymSetup) agentEnv() string {
	return fmt.Sprintf(`{name: nemo_gym_agent, agents: {arith_agent: %q}, timeout: 2m}`, g.agentURL)
}

// TestGymAgentRun: Gym rows go to a Gym simple agent (a Go transcription
// of Gym's) whose model server is trajflow's gateway (gateway.addr, a
// fixed port): every (task, rollout) has one ok row whose token ids are
// the simulator's template rendering of its conversation with mask 1
// exactly on the generated ids (every model call's answer carried the
// call's prompt ids and generated ids, which the agent validated as Gym's
// vllm_model response), generated tokens carry a policy version, the
// JSONL lines validate as Gym's verify answers, and the rewards equal,
// per (task, rollout), those of trajflow's own loop (env http, protocol
// nemo_gym) over the same resources server, tasks and seeds. A call
// that names no session, or an unknown one, is refused.
func TestGymAgentRun(t *testing.T) {
	dir := t.TempDir()
	const tasks, n = 6, 2
	path := writeGymTasks(t, dir, tasks)
	g := newGymSetup(t)

	out := filepath.Join(dir, "agent")
	cfg := gymConfig(t, dir, "agent.yaml", path, out, g.agentEnv(), "gateway: {addr: "+g.gateway+"}\n", 0)
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	for _, err := range g.agent.Errors() {
		t.Errorf("the agent failed a run: %v", err)
	}
	for _, err := range g.resources.Refused.Errors() {
		t.Errorf("the resources server refused a body: %v", err)
	}
	agentRows := readDataset(t, filepath.Join(out, schema.DataDir)).rows
	if len(agentRows) != tasks*n {
		t.Fatalf("%d rows, want %d", len(agentRows), tasks*n)
	}
	toolCalls := 0
	for _, r := range agentRows {
		if r.Status != pipeline.StatusOK || r.NumTurns == 0 {
			t.Fatalf("%s: %s %s %q", r, r.Status, r.ErrorClass, r.Error)
		}
		checkGymTokens(t, r)
		for _, m := range r.Messages {
			toolCalls += len(m.ToolCalls)
		}
		if _, ok := r.Metrics["tool_calls"]; !ok {
			t.Fatalf("%s: the verifier's tool_calls is not among the metrics %v", r, r.Metrics)
		}
		// Each model answer the agent got carried the ids the model saw
		// for the call and the ids it generated: exactly the row's.
		calls := g.agent.TokenCalls(r.Task.Index, int64(r.RolloutIndex))
		row := r.Tokens()
		i := 0
		for _, m := range r.Messages {
			if m.Role != pipeline.RoleAssistant {
				continue
			}
			if i >= len(calls) {
				t.Fatalf("%s: %d answers, the agent got %d", r, i+1, len(calls))
			}
			c := calls[i]
			i++
			if !equal64(c.Prompt, row[:m.TokenStart]) || !equal64(c.Generated, row[m.TokenStart:m.TokenEnd]) {
				t.Fatalf("%s: answer %d: prompt_token_ids %d ids, generation_token_ids %v; the row's %d, %v", r, i, len(c.Prompt), c.Generated, m.TokenStart, row[m.TokenStart:m.TokenEnd])
			}
		}
		if i != len(calls) {
			t.Fatalf("%s: %d answers, the agent got %d", r, i, len(calls))
		}
	}
	if toolCalls == 0 {
		t.Fatal("no model call asked for a tool: the test does not exercise tools")
	}
	if g.agent.Calls() < tasks*n {
		t.Fatalf("the agent made %d model calls", g.agent.Calls())
	}
	checkGymJSONL(t, g.models, out, tasks*n)
	if _, err := os.Stat(filepath.Join(out, schema.ServerAggregateMetricsFile)); err != nil {
		t.Errorf("no aggregate metrics from the agent: %v", err)
	}

	// trajflow's own loop over the same resources server.
	own := filepath.Join(dir, "own")
	cfg = gymConfig(t, dir, "own.yaml", path, own, fmt.Sprintf(`{name: http, protocol: nemo_gym, url: %q, max_turns: %d}`, g.resURL, gymMaxSteps), "", 0)
	res = run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("own loop: exit %d:\n%s", res.code, res.stderr)
	}
	ownRows := readDataset(t, filepath.Join(own, schema.DataDir)).rows
	if len(ownRows) != tasks*n {
		t.Fatalf("own loop: %d rows, want %d", len(ownRows), tasks*n)
	}
	var rewards []float64
	for k, a := range agentRows {
		o := ownRows[k]
		if o == nil {
			t.Fatalf("%+v: no row of the own loop", k)
		}
		if a.Reward != o.Reward || a.NumTurns != o.NumTurns || a.Metrics["tool_calls"] != o.Metrics["tool_calls"] {
			t.Errorf("%+v: agent reward %v turns %d tools %v; own loop reward %v turns %d tools %v", k, a.Reward, a.NumTurns, a.Metrics["tool_calls"], o.Reward, o.NumTurns, o.Metrics["tool_calls"])
		}
		rewards = append(rewards, a.Reward)
	}
	ones := 0
	for _, r := range rewards {
		if r == 1 {
			ones++
		}
	}
	if ones == 0 || ones == len(rewards) {
		t.Fatalf("rewards %v are all alike: the comparison says little", rewards)
	}
}

// checkGymTokens: r's sequence is the simulator's template rendering of
// its conversation (one segment: Gym's agent sends its whole history
// back), mask 1 lies exactly on the generated ids, and every generated
// id has a policy version.
func checkGymTokens(t *testing.T, r *pipeline.Rollout) {
	t.Helper()
	if len(r.Segments) != 0 || r.TokenContinuityBreaks != 0 || r.TokenIDsMissing {
		t.Fatalf("%s: segments %v, continuity breaks %d, ids missing %v", r, r.Segments, r.TokenContinuityBreaks, r.TokenIDsMissing)
	}
	row := r.Tokens()
	var conv []pipeline.Message
	generated := map[int32]bool{}
	for _, m := range r.Messages {
		if m.Role == pipeline.RoleAssistant {
			for p := m.TokenStart; p < m.TokenEnd; p++ {
				generated[p] = true
			}
			text := strings.TrimSuffix(sim.Detokenize(row[m.TokenStart:m.TokenEnd], false), "<|end|>")
			m = pipeline.Message{Role: m.Role, Content: text}
		}
		conv = append(conv, m)
	}
	want := (sim.Template{}).Render(conv, gymChatTools, false)
	if len(row) > len(want) || !equalIDs(row, want[:len(row)]) || len(want)-len(row) > 2 {
		n := min(len(row), len(want))
		t.Fatalf("%s: the row is not the template's rendering of its conversation:\nrow  %q\nwant %q", r, sim.Detokenize(row[:n], false), sim.Detokenize(want, false))
	}
	ones, gen := 0, 0
	for _, m := range r.Messages {
		if m.Role != pipeline.RoleAssistant {
			continue
		}
		gen += int(m.TokenEnd - m.TokenStart)
		for p := m.TokenStart; p < m.TokenEnd; p++ {
			if r.LossMask[int(p)-len(r.PromptTokenIDs)] != 1 {
				t.Fatalf("%s: generated token %d has mask 0", r, p)
			}
		}
	}
	for _, v := range r.LossMask {
		ones += int(v)
	}
	if ones != gen || gen == 0 {
		t.Fatalf("%s: mask ones %d, generated ids %d", r, ones, gen)
	}
	versioned := 0
	for _, sp := range r.PolicyVersions {
		for p := sp.Start; p < sp.End; p++ {
			if !generated[p] {
				t.Fatalf("%s: policy version span %+v covers position %d, not generated", r, sp, p)
			}
			versioned++
		}
	}
	if versioned != gen {
		t.Fatalf("%s: %d generated ids carry a policy version, of %d", r, versioned, gen)
	}
}

// checkGymJSONL: every line of OUT/jsonl validates as Gym's verify answer
// (BaseVerifyResponse), want lines in all.
func checkGymJSONL(t *testing.T, models *gymcontract.Models, out string, want int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(out, schema.JSONLDir, "*.jsonl"))
	lines := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines++
			if err := models.Validate("BaseVerifyResponse", sc.Bytes()); err != nil {
				t.Errorf("%s: a line does not validate with Gym's models: %v", f, err)
			}
		}
	}
	if lines != want {
		t.Errorf("%d JSONL lines, want %d", lines, want)
	}
}

// TestGymAgentKillResume: trajflow is killed (SIGKILL) while Gym agents'
// /run calls are in flight; the resumed run (same gateway.addr) redoes
// them: every (task, rollout) exactly once, all ok, tokens exact.
func TestGymAgentKillResume(t *testing.T) {
	dir := t.TempDir()
	const tasks, n = 24, 2
	path := writeGymTasks(t, dir, tasks)
	g := newGymSetup(t)
	out := filepath.Join(dir, "out")
	cfg := gymConfig(t, dir, "run.yaml", path, out, g.agentEnv(), "gateway: {addr: "+g.gateway+"}\n", 0.3)
	cmd := exec.Command(binary, "run", cfg)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(out, schema.DataDir)
	deadline := time.Now().Add(time.Minute)
	for len(parts(t, data)) == 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no commit within a minute:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	committed := len(readDataset(t, data).rows)
	if committed == tasks*n {
		t.Fatalf("the run finished before the kill: nothing was in flight")
	}
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("resume: exit %d:\n%s", res.code, res.stderr)
	}
	ds := readDataset(t, data)
	if len(ds.rows) != tasks*n {
		t.Fatalf("%d rows after the resume, want %d", len(ds.rows), tasks*n)
	}
	for k, r := range ds.rows {
		if r.Status != pipeline.StatusOK || r.NumTurns == 0 {
			t.Fatalf("%+v: %s %q", k, r.Status, r.Error)
		}
		checkGymTokens(t, r)
	}
	checkGymJSONL(t, g.models, out, tasks*n)
	t.Logf("%d rows committed before the kill; %d /run failures of interrupted episodes", committed, len(g.agent.Errors()))
}

// TestGymAgentGatewayRefusesUnattributedCalls: while a run is going, a
// call on the gateway's root /v1/responses without
// metadata.trajflow_session, or naming a session that is not open, is
// refused with a 4xx in OpenAI's error shape saying why; the run's own
// rows are unaffected.
func TestGymAgentGatewayRefusesUnattributedCalls(t *testing.T) {
	dir := t.TempDir()
	path := writeGymTasks(t, dir, 2)
	g := newGymSetup(t)
	probed := make(chan []string, 1)
	// An agent that probes the gateway before it runs its first row.
	inner := g.agent
	probe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/run" {
			select {
			case probed <- probeGateway(g.gateway):
			default:
			}
		}
		inner.ServeHTTP(w, r)
	})
	ps := httptest.NewServer(probe)
	defer ps.Close()
	out := filepath.Join(dir, "out")
	env := fmt.Sprintf(`{name: nemo_gym_agent, agents: {arith_agent: %q}, timeout: 2m}`, ps.URL)
	cfg := gymConfig(t, dir, "run.yaml", path, out, env, "gateway: {addr: "+g.gateway+"}\n", 0)
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	got := <-probed
	want := []string{"400 metadata.trajflow_session", "404 metadata.trajflow_session"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("probes answered %q, want %q", got, want)
	}
	if n := len(readDataset(t, filepath.Join(out, schema.DataDir)).rows); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
}

// probeGateway posts two unattributable calls to the gateway's root
// route and returns "STATUS PARAM" of each answer.
func probeGateway(addr string) []string {
	var out []string
	for _, md := range []string{``, `,"metadata":{"trajflow_session":"00000000000000000000000000000000"}`} {
		body := `{"input":[{"role":"user","content":"What is 1 + 1?"}]` + md + `}`
		res, err := http.Post("http://"+addr+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		var e struct {
			Error struct {
				Param string `json:"param"`
				Type  string `json:"type"`
			} `json:"error"`
		}
		_ = json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		out = append(out, fmt.Sprintf("%d %s", res.StatusCode, e.Error.Param))
	}
	return out
}

// TestGymAgentNeedsAFixedGatewayPort: env nemo_gym_agent with the
// gateway on a free port (gateway.addr left at 127.0.0.1:0) is refused
// by validate and by run, naming gateway.addr: the agent servers could not
// have been told where their model server is.
func TestGymAgentNeedsAFixedGatewayPort(t *testing.T) {
	dir := t.TempDir()
	path := writeGymTasks(t, dir, 1)
	g := newGymSetup(t)
	cfg := gymConfig(t, dir, "run.yaml", path, filepath.Join(dir, "out"), g.agentEnv(), "", 0)
	for _, cmd := range []string{"validate", "run"} {
		res := run(t, cmd, cfg)
		if res.code == 0 || !strings.Contains(res.stderr, `gateway.addr: "127.0.0.1:0" takes a free port`) {
			t.Fatalf("%s: exit %d:\n%s%s", cmd, res.code, res.stdout, res.stderr)
		}
	}
	if g.agent.Calls() != 0 {
		t.Fatal("the agent was called")
	}
}
