package ollama

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/e2e/agentcalc"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
)

// sdkAgents finds node and the example agents written on the real npm
// SDKs (examples/agents, with node_modules from npm ci there). Without
// them the test skips, except under CI=true, where it fails.
func sdkAgents(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "examples", "agents"))
	if err != nil {
		t.Fatal(err)
	}
	node, err = exec.LookPath("node")
	missing := ""
	if err != nil {
		missing = "node is not on PATH"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		missing = "examples/agents/node_modules is missing (run npm ci there)"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s", missing)
		}
		t.Skip(missing)
	}
	return node, dir
}

// TestOllamaAgentSDKs: the example agents on the real SDKs (the OpenAI
// SDK's Chat Completions and Responses, the OpenAI Agents SDK over
// Responses, the Anthropic SDK's Messages; streaming) call the real
// engine through trajflow run's gateway, in chat mode (the engine has no
// /tokenize), model tiny-tools, 2 tasks × 2. Every (task, rollout) has one
// ok row, no segments; each tool call of the model is answered by the
// calculator's result for it, and the rows hold the calls the engine
// made; the reward is the agent's (1 exactly when the last answer holds
// the expected answer); the rows' token counts are the engine's usage.
func TestOllamaAgentSDKs(t *testing.T) {
	node, agents := sdkAgents(t)
	e := sharedEngine(t)
	const tasks, n = 2, 2
	for _, c := range []struct{ name, script string }{
		{"openai-chat", "openai-chat.mjs"},
		{"openai-responses", "openai-responses.mjs"},
		{"openai-agents", "openai-agents.mjs"},
		{"anthropic", "anthropic.mjs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorder(t, "http://"+e.addr)
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			path := mathTasks(t, dir, tasks)
			q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
			cfg := writeFile(t, dir, "run.yaml", `run: {id: ollama-agent-e2e, progress: 0}
source: {path: `+q(path)+`}
repeat: {n: 2, seed: 1234}
generate:
  endpoints: [`+q(rec.url)+`]
  model: tiny-tools
  api: chat
  concurrency: 4
  params: {temperature: 1.0, max_tokens: 64}
env: {name: agent, command: [`+q(node)+`, `+q(filepath.Join(agents, c.script))+`], env: {TRAJFLOW_STREAM: "1", OPENAI_AGENTS_DISABLE_TRACING: "1"}, timeout: 3m}
groups: {keep: all}
output: {dir: `+q(out)+`}
`)
			res := trajflow(t, "run", cfg)
			if res.code != 0 {
				if errs, err := readback.Dir(filepath.Join(out, "errors")); err == nil {
					for _, r := range errs {
						t.Logf("task %d rollout %d: %s %s", r.Task.Index, r.RolloutIndex, r.ErrorClass, r.Error)
					}
				}
				t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
			}
			rs := rows(t, out, tasks, n)
			expected := map[int64]string{}
			for i, line := range strings.Split(strings.TrimSpace(readText(t, path)), "\n") {
				var row struct {
					Expected string `json:"expected_answer"`
				}
				if err := json.Unmarshal([]byte(line), &row); err != nil {
					t.Fatal(err)
				}
				expected[int64(i)] = row.Expected
			}
			engineCalls := 0
			for _, x := range rec.exchanges() {
				if x.Status != 200 {
					t.Errorf("the engine answered HTTP %d: %s", x.Status, x.RawResponse)
				}
				if len(x.Response.Choices) > 0 {
					engineCalls += len(x.Response.Choices[0].Message.ToolCalls)
				}
			}
			rowCalls, answered := 0, 0
			for _, r := range rs {
				if r.Status != pipeline.StatusOK || r.NumTurns == 0 {
					t.Fatalf("task %d rollout %d: %s %s %q, %d turns", r.Task.Index, r.RolloutIndex, r.Status, r.ErrorClass, r.Error, r.NumTurns)
				}
				if len(r.Segments) != 0 {
					t.Errorf("task %d rollout %d: segments %+v; the agent never rewrites its history", r.Task.Index, r.RolloutIndex, r.Segments)
				}
				last := r.Messages[len(r.Messages)-1]
				if last.Role != pipeline.RoleAssistant {
					t.Fatalf("task %d rollout %d: the last message is %s", r.Task.Index, r.RolloutIndex, last.Role)
				}
				want := 0.0
				if x := expected[r.Task.Index]; x != "" && strings.Contains(last.Content, x) {
					want = 1
				}
				if r.Reward != want {
					t.Errorf("task %d rollout %d: reward %v, want the agent's %v (last answer %q)", r.Task.Index, r.RolloutIndex, r.Reward, want, last.Content)
				}
				calls := map[string]pipeline.ToolCall{}
				for i, m := range r.Messages {
					for _, tc := range m.ToolCalls {
						if m.Role != pipeline.RoleAssistant || tc.ID == "" || tc.Name != "calculator" {
							t.Errorf("task %d rollout %d: message %d (%s) has tool call %+v", r.Task.Index, r.RolloutIndex, i, m.Role, tc)
						}
						calls[tc.ID] = tc
						rowCalls++
					}
					if m.Role != pipeline.RoleTool {
						continue
					}
					tc, ok := calls[m.ToolCallID]
					if !ok {
						t.Errorf("task %d rollout %d: tool result %d answers %q, which no earlier call has", r.Task.Index, r.RolloutIndex, i, m.ToolCallID)
						continue
					}
					var args struct{ Expression any }
					w := "error: the arguments are not JSON" // lib.mjs's runTool
					if json.Unmarshal([]byte(tc.Arguments), &args) == nil {
						e, _ := args.Expression.(string)
						w = agentcalc.Calculate(e)
					}
					if m.Content != w {
						t.Errorf("task %d rollout %d: tool result %q for %s, want the calculator's %q", r.Task.Index, r.RolloutIndex, m.Content, tc.Arguments, w)
					}
					answered++
				}
			}
			// The rows hold every call the engine made (each model call of
			// an agent is a turn of its row).
			if rowCalls != engineCalls {
				t.Errorf("the rows hold %d tool calls, the engine made %d", rowCalls, engineCalls)
			}
			t.Logf("%d rows, %d engine calls, %d tool calls, %d answered by the calculator", len(rs), len(rec.exchanges()), rowCalls, answered)
			checkUsage(t, rs, rec.exchanges())
		})
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
