package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// agentScript is the plain-Python agent of examples/agents.
func agentScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "examples", "agents", "python_agent.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 is needed: %v", err)
		}
		t.Skip("no python3")
	}
	return p
}

// agentConfig is what varies between the agent runs' configs.
type agentConfig struct {
	tasks, out string
	mode       string            // the agent's behaviour (python_agent.py's first argument)
	command    []string          // env.command instead of python_agent.py (mode is then unused)
	agentEnv   map[string]string // env.env: more variables of the agent's environment
	api        string            // generate.api
	n          int
	timeout    string // env.timeout
	timeScale  float64
	retries    int    // groups.sample_retries
	extra      string // more YAML lines
}

func writeAgentConfig(t *testing.T, dir, name string, c agentConfig) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	if c.api == "" {
		c.api = "tokens"
	}
	if c.timeout == "" {
		c.timeout = "2m"
	}
	if c.command == nil {
		c.command = []string{"python3", agentScript(t), c.mode}
	}
	command, _ := json.Marshal(c.command)
	agentEnv, _ := json.Marshal(c.agentEnv)
	if c.agentEnv == nil {
		agentEnv = []byte("{}")
	}
	cfg := fmt.Sprintf(`run: {id: e2e-agent, progress: 0}
source: {path: %s}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-agent
  api: %s
  concurrency: 16
  params: {max_tokens: 96}
  sim: {seed: 7, accuracy: 0.6, time_scale: %g}
env: {name: agent, command: %s, env: %s, timeout: %s}
groups: {keep: all, sample_retries: %d}
output: {dir: %s, file_rows: 8, batch_rows: 8}
%s`, q(c.tasks), c.n, c.api, c.timeScale, command, agentEnv, c.timeout, c.retries, q(c.out), c.extra)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentRows reads every committed row of out: data/ and errors/.
func agentRows(t *testing.T, out string) []*pipeline.Rollout {
	t.Helper()
	var rs []*pipeline.Rollout
	for _, d := range []string{schema.DataDir, schema.ErrorsDir} {
		for k, r := range readDataset(t, filepath.Join(out, d)).rows {
			_ = k
			rs = append(rs, r)
		}
	}
	return rs
}

// calculator is python_agent.py's tool.
func calculator(expr string) string {
	if !regexp.MustCompile(`^[0-9+\-*/(). ]+$`).MatchString(expr) {
		return "error: only digits and + - * / ( ) are allowed"
	}
	return "" // evaluated by the agent; the test checks the tool result's place, not its arithmetic
}

// TestAgentRun: a plain-Python agent, run per rollout, calls the
// simulator through the gateway in tokens mode with a calculator tool.
// Every (task, rollout) has one ok row; its reward is the agent's (1
// exactly when the last answer holds the expected answer); each tool call
// of the model is followed by the agent's tool result for that call; and
// the row's token ids are the template's rendering of its conversation,
// with mask 1 exactly on the generated ids.
func TestAgentRun(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 6, 3)
	out := filepath.Join(dir, "out")
	cfg := writeAgentConfig(t, dir, "run.yaml", agentConfig{tasks: tasks, out: out, mode: "solve", n: 2})
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	rs := agentRows(t, out)
	if len(rs) != 12 {
		t.Fatalf("%d rows, want 12", len(rs))
	}
	expected := map[int64]string{}
	for i, line := range strings.Split(strings.TrimSpace(readText(t, tasks)), "\n") {
		var row struct {
			Expected string `json:"expected_answer"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		expected[int64(i)] = row.Expected
	}
	toolCalls := 0
	for _, r := range rs {
		if r.Status != pipeline.StatusOK || r.NumTurns == 0 {
			t.Fatalf("%s: %s %s %q, %d turns", r, r.Status, r.ErrorClass, r.Error, r.NumTurns)
		}
		last := r.Messages[len(r.Messages)-1]
		if last.Role != pipeline.RoleAssistant {
			t.Fatalf("%s: the last message is %s", r, last.Role)
		}
		want := 0.0
		if strings.Contains(last.Content, expected[r.Task.Index]) {
			want = 1
		}
		if r.Reward != want {
			t.Errorf("%s: reward %v, want the agent's %v (last answer %q, expected %q)", r, r.Reward, want, last.Content, expected[r.Task.Index])
		}
		calls := map[string]bool{}
		for i, m := range r.Messages {
			for _, c := range m.ToolCalls {
				calls[c.ID] = true
				toolCalls++
				if c.Name != "calculator" {
					t.Errorf("%s: tool call %q", r, c.Name)
				}
			}
			if m.Role == pipeline.RoleTool {
				if !calls[m.ToolCallID] || r.Messages[i-1].Role == pipeline.RoleUser {
					t.Errorf("%s: tool result %d answers %q, which no earlier call has", r, i, m.ToolCallID)
				}
				var args struct{ Expression string }
				for _, p := range r.Messages[:i] {
					for _, c := range p.ToolCalls {
						if c.ID == m.ToolCallID {
							_ = json.Unmarshal([]byte(c.Arguments), &args)
						}
					}
				}
				if w := calculator(args.Expression); w != "" && m.Content != w {
					t.Errorf("%s: tool result %q, want %q", r, m.Content, w)
				}
			}
		}
		checkAgentTokens(t, r)
		if len(r.Segments) != 0 || r.TokenContinuityBreaks != 0 {
			t.Errorf("%s: segments %v, continuity breaks %d", r, r.Segments, r.TokenContinuityBreaks)
		}
	}
	if toolCalls == 0 {
		t.Fatal("no row holds a tool call: the test does not exercise tools")
	}
}

// agentTools are python_agent.py's tool definitions.
var agentTools = []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"calculator","description":"Evaluates an arithmetic expression.","parameters":{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}}}`)}

// checkAgentTokens checks that r's sequence, segment by segment, is the
// simulator's template's rendering of the segment's conversation as the
// model wrote it (each answer as the text of its generated ids, tool-call
// markup included: the ids are what the model produced, not a re-render
// of the parsed message), and that mask 1 lies exactly on the answers'
// ids.
func checkAgentTokens(t *testing.T, r *pipeline.Rollout) {
	t.Helper()
	checkAgentTokensTools(t, r, func([]int32) []json.RawMessage { return agentTools })
}

// checkAgentTokensTools is checkAgentTokens with the tool definitions each
// segment was rendered with given by tools (called with the segment's
// ids).
func checkAgentTokensTools(t *testing.T, r *pipeline.Rollout, tools func(seq []int32) []json.RawMessage) {
	t.Helper()
	row := r.Tokens()
	bounds := []pipeline.Segment{{}}
	bounds = append(bounds, r.Segments...)
	for k, sg := range bounds {
		endMsg, endTok := len(r.Messages), len(row)
		if k+1 < len(bounds) {
			endMsg, endTok = int(bounds[k+1].Message), int(bounds[k+1].Token)
		}
		seq := row[max(sg.Token, 0):endTok]
		var conv []pipeline.Message
		for _, m := range r.Messages[sg.Message:endMsg] {
			if m.Role == pipeline.RoleAssistant {
				text := strings.TrimSuffix(sim.Detokenize(row[m.TokenStart:m.TokenEnd], false), "<|end|>")
				m = pipeline.Message{Role: m.Role, Content: text}
			}
			conv = append(conv, m)
		}
		want := (sim.Template{}).Render(conv, tools(seq), false)
		// The last answer of a segment is not closed in the row (nothing
		// came after it); the rendering closes it.
		if len(seq) > len(want) || !equalIDs(seq, want[:len(seq)]) || len(want)-len(seq) > 2 {
			n := min(len(seq), len(want))
			t.Fatalf("%s: segment %d is not the template's rendering of its conversation:\nrow  %q\nwant %q", r, k, sim.Detokenize(seq[:n], false), sim.Detokenize(want, false))
		}
	}
	ones, generated := 0, 0
	for _, v := range r.LossMask {
		ones += int(v)
	}
	for _, m := range r.Messages {
		if m.Role == pipeline.RoleAssistant {
			generated += int(m.TokenEnd - m.TokenStart)
			for p := m.TokenStart; p < m.TokenEnd; p++ {
				if r.LossMask[int(p)-len(r.PromptTokenIDs)] != 1 {
					t.Fatalf("%s: generated token %d has mask 0", r, p)
				}
			}
		}
	}
	if ones != generated || generated == 0 {
		t.Fatalf("%s: mask ones %d, generated ids %d", r, ones, generated)
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentRewriteAndFailures: an agent that rewrites its history gets
// rows of two segments (and no continuity break); one that never calls the
// model, one that crashes and one that outlives env.timeout get error rows
// of their classes, with the crash's stderr; in chat and tokens mode.
func TestAgentRewriteAndFailures(t *testing.T) {
	cases := []struct {
		mode, api, timeout string
		class              string
		errHas             string
	}{
		{mode: "rewrite", api: "tokens"},
		{mode: "rewrite", api: "chat"},
		{mode: "nocall", api: "tokens", class: envs.ClassAgentNoCall, errHas: "made no model call"},
		{mode: "crash", api: "tokens", class: envs.ClassAgentCrash, errHas: "out of ideas"},
		{mode: "slow", api: "tokens", timeout: "3s", class: envs.ClassAgentTimeout},
	}
	for _, c := range cases {
		t.Run(c.mode+"-"+c.api, func(t *testing.T) {
			dir := t.TempDir()
			tasks := writeTasks(t, dir, 2, 5)
			out := filepath.Join(dir, "out")
			cfg := writeAgentConfig(t, dir, "run.yaml", agentConfig{tasks: tasks, out: out, mode: c.mode, api: c.api, n: 2, timeout: c.timeout})
			start := time.Now()
			res := run(t, "run", cfg)
			rs := agentRows(t, out)
			if len(rs) != 4 {
				t.Fatalf("exit %d, %d rows, want 4:\n%s", res.code, len(rs), res.stderr)
			}
			for _, r := range rs {
				if c.class == "" {
					if res.code != 0 || r.Status != pipeline.StatusOK || len(r.Segments) != 1 || r.TokenContinuityBreaks != 0 {
						t.Fatalf("exit %d; %s: %s %q, segments %+v, breaks %d", res.code, r, r.Status, r.Error, r.Segments, r.TokenContinuityBreaks)
					}
					sg := r.Segments[0]
					if sg.Turn != 3 || r.Messages[sg.Message].Role != pipeline.RoleSystem || !strings.HasPrefix(r.Messages[sg.Message+1].Content, "Earlier you answered") {
						t.Fatalf("%s: segment %+v does not start at the summary", r, sg)
					}
					if c.api == "tokens" {
						checkAgentTokens(t, r)
					} else if sg.Token <= 0 && !r.TokenIDsMissing {
						t.Fatalf("%s: segment %+v has no token position", r, sg)
					}
					continue
				}
				if r.Status != pipeline.StatusError || r.ErrorClass != c.class || !strings.Contains(r.Error, c.errHas) {
					t.Fatalf("%s: %s %s %q; want an error of class %s saying %q", r, r.Status, r.ErrorClass, r.Error, c.class, c.errHas)
				}
			}
			if c.class != "" && res.code != 4 {
				t.Errorf("a run of only errors exited %d, want 4 (rollouts kept failing):\n%s", res.code, res.stderr)
			}
			if c.mode == "slow" && time.Since(start) > time.Minute {
				t.Errorf("the timed-out agents held the run %s", time.Since(start))
			}
		})
	}
}

// TestAgentMalformedCalls: 20 malformed calls of each agent (wrong key,
// unknown session, bad JSON, a body over gateway.max_body, n > 1,
// unsupported parameters, a tool result for an unknown call, in the
// three APIs) are each refused with a 4xx in the API's own error shape
// (the agent checks them and reports 1 only when all were), and the run
// goes on: every row ok.
func TestAgentMalformedCalls(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 2, 9)
	out := filepath.Join(dir, "out")
	cfg := writeAgentConfig(t, dir, "run.yaml", agentConfig{tasks: tasks, out: out, mode: "malformed", n: 2,
		extra: "gateway: {max_body: 1048576}\n"})
	t.Setenv("AGENT_HUGE_BYTES", strconv.Itoa(1<<20+1024))
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	rs := agentRows(t, out)
	if len(rs) != 4 {
		t.Fatalf("%d rows, want 4", len(rs))
	}
	for _, r := range rs {
		if r.Status != pipeline.StatusOK || r.Reward != 1 || r.Metrics["refused_right"] != 20 {
			t.Fatalf("%s: %s reward %v, %v of 20 refusals right:\n%s", r, r.Status, r.Reward, r.Metrics["refused_right"], res.stderr)
		}
	}
}

// TestAgentKillResume: trajflow is killed (SIGKILL) while agent sessions
// are in flight; the agents die with it, and the resumed run redoes the
// interrupted sessions: every (task, rollout) exactly once, all ok.
func TestAgentKillResume(t *testing.T) {
	dir := t.TempDir()
	const tasks, n = 24, 2
	path := writeTasks(t, dir, tasks, 11)
	out := filepath.Join(dir, "out")
	cfg := writeAgentConfig(t, dir, "run.yaml", agentConfig{tasks: path, out: out, mode: "solve", n: n, timeScale: 0.3})
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
	agents := agentPIDs(t, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	committed := len(readDataset(t, data).rows)
	if committed == tasks*n {
		t.Fatalf("the run finished before the kill: nothing was in flight")
	}
	if len(agents) == 0 {
		t.Fatalf("no agent was running at the kill")
	}
	// The agents die with trajflow.
	for deadline := time.Now().Add(10 * time.Second); ; {
		alive := 0
		for _, pid := range agents {
			if syscall.Kill(pid, 0) == nil && !zombie(pid) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d agents outlived trajflow's kill", alive, len(agents))
		}
		time.Sleep(50 * time.Millisecond)
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
	}
	t.Logf("%d rows committed before the kill, %d agents in flight", committed, len(agents))
}

// agentPIDs lists the processes whose parent is pid (the agents a run
// started).
func agentPIDs(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// TestAgentSampleRetries: with groups.sample_retries, an agent that
// crashes on a sample's first try is run again in a new session, and the
// row is the second try's: ok, retries 1, every (task, rollout) once.
func TestAgentSampleRetries(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3, 13)
	out := filepath.Join(dir, "out")
	marks := t.TempDir()
	cfg := writeAgentConfig(t, dir, "run.yaml", agentConfig{tasks: tasks, out: out, mode: "flaky", n: 2, retries: 1,
		agentEnv: map[string]string{"AGENT_MARK_DIR": marks}})
	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s", res.code, res.stderr)
	}
	rs := agentRows(t, out)
	if len(rs) != 6 {
		t.Fatalf("%d rows, want 6", len(rs))
	}
	for _, r := range rs {
		if r.Status != pipeline.StatusOK || r.Retries != 1 || r.NumTurns == 0 {
			t.Fatalf("%s: %s %q, retries %d, %d turns; want ok on the second try", r, r.Status, r.Error, r.Retries, r.NumTurns)
		}
	}
}
