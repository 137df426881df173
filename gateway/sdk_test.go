package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// scripted is a Model that answers a session's first call with a
// calculator tool call and every later one with text holding the
// answer, recording the calls.
type scripted struct {
	mu    sync.Mutex
	calls []*Call
}

const scriptedCallID = "call_calc_1"

func (m *scripted) Call(ctx context.Context, c *Call) (*Answer, error) {
	m.mu.Lock()
	m.calls = append(m.calls, c)
	n := len(m.calls)
	m.mu.Unlock()
	if n == 1 {
		return &Answer{
			Message: pipeline.Message{Role: pipeline.RoleAssistant, ToolCalls: []pipeline.ToolCall{{
				ID: scriptedCallID, Type: "function", Name: "calculator", Arguments: `{"expression":"17 * 3"}`,
			}}},
			FinishReason: "tool_calls", PromptTokens: 40, CompletionTokens: 12,
		}, nil
	}
	return &Answer{
		Message:      pipeline.Message{Role: pipeline.RoleAssistant, Content: "The calculator says 17 * 3 = 51, so the answer is 51."},
		FinishReason: "stop", PromptTokens: 60, CompletionTokens: 15,
	}, nil
}

func (m *scripted) recorded() []*Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Call(nil), m.calls...)
}

// TestRealSDKs runs the example agents of examples/agents, written on
// the real npm SDKs, against a gateway. It needs node and
// examples/agents/node_modules (npm ci there); without them it skips,
// except under CI=true, where it fails.
func TestRealSDKs(t *testing.T) {
	dir, _ := filepath.Abs(filepath.Join("..", "examples", "agents"))
	node, err := exec.LookPath("node")
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

	cases := []struct {
		name, script string
		env          []string
		api          string
		stream       bool
		calls        int  // model calls the agent makes
		toolResult   bool // the second call carries the tool result
	}{
		{"chat stream", "openai-chat.mjs", nil, AgentChat, true, 2, true},
		{"chat", "openai-chat.mjs", []string{"TRAJFLOW_STREAM=0"}, AgentChat, false, 2, true},
		{"responses stream", "openai-responses.mjs", nil, AgentResponses, true, 2, true},
		{"responses", "openai-responses.mjs", []string{"TRAJFLOW_STREAM=0"}, AgentResponses, false, 2, true},
		{"agents responses stream", "openai-agents.mjs", nil, AgentResponses, true, 2, true},
		{"agents responses", "openai-agents.mjs", []string{"TRAJFLOW_STREAM=0"}, AgentResponses, false, 2, true},
		{"agents chat stream", "openai-agents.mjs", []string{"TRAJFLOW_OPENAI_API=chat_completions"}, AgentChat, true, 2, true},
		{"agents chat", "openai-agents.mjs", []string{"TRAJFLOW_OPENAI_API=chat_completions", "TRAJFLOW_STREAM=0"}, AgentChat, false, 2, true},
		{"anthropic stream", "anthropic.mjs", nil, AgentMessages, true, 2, true},
		{"anthropic", "anthropic.mjs", []string{"TRAJFLOW_STREAM=0"}, AgentMessages, false, 2, true},
		{"rewrite history", "rewrite-history.mjs", nil, AgentChat, false, 2, false},
		{"no call", "no-call.mjs", nil, "", false, 0, false},
	}

	srv := New(Options{Model: "policy"})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &scripted{}
			s := srv.Open(m)
			defer s.End()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, filepath.Join(dir, tc.script))
			cmd.Dir = dir
			cmd.Env = append(os.Environ(),
				"OPENAI_BASE_URL="+s.OpenAIBaseURL, "OPENAI_API_KEY="+s.Key,
				"ANTHROPIC_BASE_URL="+s.AnthropicBaseURL, "ANTHROPIC_API_KEY="+s.Key,
				"TRAJFLOW_MODEL=policy", "OPENAI_AGENTS_DISABLE_TRACING=1")
			cmd.Env = append(cmd.Env, tc.env...)
			cmd.Stdin = strings.NewReader(`{"question":"What is 17 * 3?","expected_answer":"51"}`)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", tc.script, err, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var last struct {
				Reward float64 `json:"reward"`
				Answer string  `json:"answer"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Reward != 1 {
				t.Fatalf("last line %q: reward not 1 (%v)\nstderr:\n%s", lines[len(lines)-1], err, stderr.String())
			}

			calls := m.recorded()
			if len(calls) != tc.calls || s.Calls() != tc.calls {
				t.Fatalf("model calls = %d, session's Calls() = %d; want %d", len(calls), s.Calls(), tc.calls)
			}
			for i, c := range calls {
				if c.API != tc.api || c.Stream != tc.stream {
					t.Errorf("call %d: API %q stream %v; want %q %v", i, c.API, c.Stream, tc.api, tc.stream)
				}
				if tc.script == "rewrite-history.mjs" && i == 1 {
					continue // its second call offers no tools
				}
				checkCalculatorTool(t, i, c)
			}
			if tc.calls == 0 {
				return
			}
			if first := calls[0].Messages; first[len(first)-1].Role != pipeline.RoleUser || !strings.Contains(first[len(first)-1].Content, "17 * 3") {
				t.Errorf("first call's last message = %+v; want the question", first[len(first)-1])
			}
			second := calls[1].Messages
			var results []pipeline.Message
			for _, m := range second {
				if m.Role == pipeline.RoleTool {
					results = append(results, m)
				}
			}
			if !tc.toolResult {
				if len(results) != 0 || len(second) != 2 {
					t.Errorf("rewritten history: second call's messages = %+v; want a system and a summary", second)
				}
				return
			}
			if len(results) != 1 || results[0].ToolCallID != scriptedCallID || !strings.Contains(results[0].Content, "51") {
				t.Fatalf("second call's tool results = %+v; want one for %s holding 51", results, scriptedCallID)
			}
			var asked bool
			for _, m := range second {
				for _, call := range m.ToolCalls {
					if m.Role == pipeline.RoleAssistant && call.ID == scriptedCallID && call.Name == "calculator" {
						var args struct{ Expression string }
						if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args.Expression != "17 * 3" {
							t.Errorf("the tool call's arguments came back as %q", call.Arguments)
						}
						asked = true
					}
				}
			}
			if !asked {
				t.Errorf("second call's messages lack the assistant's tool call: %+v", second)
			}
		})
	}
}

// checkCalculatorTool checks the call offered the calculator tool in
// Chat Completions' form.
func checkCalculatorTool(t *testing.T, i int, c *Call) {
	t.Helper()
	if len(c.Tools) != 1 {
		t.Errorf("call %d: %d tools; want the calculator", i, len(c.Tools))
		return
	}
	var tool struct {
		Type     string `json:"type"`
		Function struct {
			Name       string `json:"name"`
			Parameters struct {
				Properties map[string]any `json:"properties"`
			} `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(c.Tools[0], &tool); err != nil || tool.Type != "function" || tool.Function.Name != "calculator" || tool.Function.Parameters.Properties["expression"] == nil {
		t.Errorf("call %d: tool %s is not the calculator in Chat form (%v)", i, c.Tools[0], err)
	}
}
