package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/e2e/agentcalc"
	"github.com/trajflow/trajflow/pipeline"
)

// sdkAgents finds node and the example agents written on the real npm
// SDKs (examples/agents, with node_modules from npm ci there). Without
// them the test skips, except under CI=true, where it fails.
func sdkAgents(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "agents"))
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

// sdkAgentCase is one SDK agent as the tests run it: its script and the
// variables that pick its API and streaming.
type sdkAgentCase struct {
	name, script string
	env          map[string]string
}

// sdkAgentCases are the four SDK agents, streaming; the Agents SDK over
// the Responses API and over Chat Completions.
var sdkAgentCases = []sdkAgentCase{
	{"openai-chat", "openai-chat.mjs", nil},
	{"openai-responses", "openai-responses.mjs", nil},
	{"openai-agents-responses", "openai-agents.mjs", nil},
	{"openai-agents-chat", "openai-agents.mjs", map[string]string{"TRAJFLOW_OPENAI_API": "chat_completions"}},
	{"anthropic", "anthropic.mjs", nil},
}

// agentEnv is the agent's extra environment for a case: its own
// variables, streaming on, the Agents SDK's tracing off.
func (c sdkAgentCase) agentEnv() map[string]string {
	env := map[string]string{"TRAJFLOW_STREAM": "1", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
	for k, v := range c.env {
		env[k] = v
	}
	return env
}

// expectedAnswers maps a task file's task indexes to their expected
// answers.
func expectedAnswers(t *testing.T, tasks string) map[int64]string {
	t.Helper()
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
	return expected
}

// checkSDKRow checks one row of an SDK agent: ok, its reward the agent's
// (1 exactly when the last assistant message holds the expected answer),
// every tool result answering an earlier calculator call of the model
// with the calculator's result, no segments. It returns how many tool
// calls were answered by a tool message right after them.
func checkSDKRow(t *testing.T, r *pipeline.Rollout, expected string) (answered int) {
	t.Helper()
	if r.Status != pipeline.StatusOK || r.NumTurns == 0 {
		t.Fatalf("%s: %s %s %q, %d turns", r, r.Status, r.ErrorClass, r.Error, r.NumTurns)
	}
	last := r.Messages[len(r.Messages)-1]
	if last.Role != pipeline.RoleAssistant {
		t.Fatalf("%s: the last message is %s", r, last.Role)
	}
	want := 0.0
	if expected != "" && strings.Contains(last.Content, expected) {
		want = 1
	}
	if r.Reward != want {
		t.Errorf("%s: reward %v, want the agent's %v (last answer %q, expected %q)", r, r.Reward, want, last.Content, expected)
	}
	calls := map[string]pipeline.ToolCall{}
	for i, m := range r.Messages {
		for _, c := range m.ToolCalls {
			if m.Role != pipeline.RoleAssistant || c.ID == "" || c.Name != "calculator" {
				t.Errorf("%s: message %d (%s) has tool call %+v", r, i, m.Role, c)
			}
			calls[c.ID] = c
		}
		if m.Role != pipeline.RoleTool {
			continue
		}
		c, ok := calls[m.ToolCallID]
		if !ok {
			t.Errorf("%s: tool result %d answers %q, which no earlier call has", r, i, m.ToolCallID)
			continue
		}
		var args struct{ Expression any }
		w := "error: the arguments are not JSON" // lib.mjs's runTool
		if json.Unmarshal([]byte(c.Arguments), &args) == nil {
			e, _ := args.Expression.(string) // not a string: calculate's error
			w = agentcalc.Calculate(e)
		}
		if m.Content != w {
			t.Errorf("%s: tool result %q for %s, want the calculator's %q", r, m.Content, c.Arguments, w)
		}
		if p := r.Messages[i-1]; p.Role == pipeline.RoleAssistant && len(p.ToolCalls) > 0 && p.ToolCalls[0].ID == m.ToolCallID {
			answered++
		}
	}
	if len(r.Segments) != 0 || r.TokenContinuityBreaks != 0 {
		t.Errorf("%s: segments %+v, continuity breaks %d; these agents never rewrite their history", r, r.Segments, r.TokenContinuityBreaks)
	}
	return answered
}

// rowTools are the tool definitions a segment of a row was rendered with:
// the "<tools>" system block the simulator's template puts first, each of
// them the calculator.
func rowTools(t *testing.T, r *pipeline.Rollout) func(seq []int32) []json.RawMessage {
	return func(seq []int32) []json.RawMessage {
		if len(seq) == 0 || seq[0] != sim.TokSystem {
			return nil
		}
		end := 1
		for end < len(seq) && seq[end] != sim.TokEnd {
			end++
		}
		text, ok := strings.CutPrefix(sim.Detokenize(seq[1:end], false), "<tools>")
		if !ok {
			return nil
		}
		var tools []json.RawMessage
		if err := json.Unmarshal([]byte(text), &tools); err != nil {
			t.Fatalf("%s: the tools block %q is not a JSON list: %v", r, text, err)
		}
		for _, tool := range tools {
			var f struct {
				Function struct {
					Name       string `json:"name"`
					Parameters struct {
						Properties map[string]any `json:"properties"`
					} `json:"parameters"`
				} `json:"function"`
			}
			if err := json.Unmarshal(tool, &f); err != nil || f.Function.Name != "calculator" || f.Function.Parameters.Properties["expression"] == nil {
				t.Fatalf("%s: the row offers tool %s, want only the calculator", r, tool)
			}
		}
		return tools
	}
}

// TestAgentSDKs runs the example agents written on the real SDKs (the
// OpenAI SDK's Chat Completions and Responses, the OpenAI Agents SDK over
// both, the Anthropic SDK's Messages; all streaming) through trajflow run
// on the simulator, in tokens and in chat mode, 3 tasks × 2. Every
// (task, rollout) has one ok row; its reward is the agent's; the model's
// calculator calls are in the rows, followed by the calculator's results
// for them; the rows have no segments (the agents never rewrite their
// history) and, in tokens mode, no continuity break, their ids the
// template's rendering of the conversation as the model wrote it, mask 1
// exactly on the generated ids. An agent that rewrites its history
// (rewrite-history.mjs) gets rows of exactly one segment.
func TestAgentSDKs(t *testing.T) {
	node, dir := sdkAgents(t)
	const tasks, n = 3, 2
	for _, api := range []string{"tokens", "chat"} {
		for _, c := range sdkAgentCases {
			t.Run(api+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				tmp := t.TempDir()
				path := writeTasks(t, tmp, tasks, 21)
				out := filepath.Join(tmp, "out")
				cfg := writeAgentConfig(t, tmp, "run.yaml", agentConfig{tasks: path, out: out, api: api, n: n,
					command: []string{node, filepath.Join(dir, c.script)}, agentEnv: c.agentEnv()})
				res := run(t, "run", cfg)
				if res.code != 0 {
					t.Fatalf("exit %d:\n%s", res.code, res.stderr)
				}
				rs := agentRows(t, out)
				checkKeys(t, rs, tasks, n)
				expected := expectedAnswers(t, path)
				answered := 0
				for _, r := range rs {
					answered += checkSDKRow(t, r, expected[r.Task.Index])
					if api == "tokens" {
						checkAgentTokensTools(t, r, rowTools(t, r))
					}
				}
				if answered == 0 {
					// The simulator calls a tool about half the time: 6 rows
					// without one are a 1 in 64 chance at worst, and the
					// seeds are fixed.
					t.Fatalf("no row holds a calculator call answered by its result: the test does not exercise tools")
				}
			})
		}
		t.Run(api+"/rewrite-history", func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			path := writeTasks(t, tmp, tasks, 22)
			out := filepath.Join(tmp, "out")
			cfg := writeAgentConfig(t, tmp, "run.yaml", agentConfig{tasks: path, out: out, api: api, n: n,
				command: []string{node, filepath.Join(dir, "rewrite-history.mjs")}})
			res := run(t, "run", cfg)
			if res.code != 0 {
				t.Fatalf("exit %d:\n%s", res.code, res.stderr)
			}
			rs := agentRows(t, out)
			checkKeys(t, rs, tasks, n)
			for _, r := range rs {
				if r.Status != pipeline.StatusOK || len(r.Segments) != 1 || r.TokenContinuityBreaks != 0 {
					t.Fatalf("%s: %s %q, segments %+v, breaks %d; want one segment", r, r.Status, r.Error, r.Segments, r.TokenContinuityBreaks)
				}
				if sg := r.Segments[0]; sg.Turn != 2 || r.Messages[sg.Message].Role != pipeline.RoleSystem ||
					!strings.HasPrefix(r.Messages[sg.Message+1].Content, "Question: ") {
					t.Fatalf("%s: segment %+v does not start at the summary", r, sg)
				}
				if api == "tokens" {
					checkAgentTokensTools(t, r, rowTools(t, r))
				}
			}
		})
	}
}

// checkKeys checks that rs has exactly one row per (task, rollout).
func checkKeys(t *testing.T, rs []*pipeline.Rollout, tasks, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rs {
		seen[fmt.Sprintf("%d/%d", r.Task.Index, r.RolloutIndex)]++
	}
	for task := range tasks {
		for i := range n {
			if k := fmt.Sprintf("%d/%d", task, i); seen[k] != 1 {
				t.Errorf("task %d rollout %d: %d rows, want 1", task, i, seen[k])
			}
		}
	}
	if len(rs) != tasks*n {
		t.Fatalf("%d rows, want %d", len(rs), tasks*n)
	}
}
