package inference_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// qwen3Oracle is the part of testdata/qwen3/fixture.json that Python
// computed: vLLM's hermes parse of tool-call texts and Python's
// json.dumps(json.loads(text), ensure_ascii=False).
type qwen3Oracle struct {
	Hermes []struct {
		Output    string  `json:"output"`
		Content   *string `json:"content"`
		ToolCalls []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"tool_calls"`
	} `json:"hermes"`
	PythonJSON []struct {
		In  string `json:"in"`
		Out string `json:"out"`
	} `json:"python_json"`
}

func loadOracle(t *testing.T) *qwen3Oracle {
	t.Helper()
	data, err := os.ReadFile("../testdata/qwen3/fixture.json")
	if err != nil {
		t.Fatal(err)
	}
	var o qwen3Oracle
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatal(err)
	}
	if len(o.Hermes) == 0 || len(o.PythonJSON) == 0 {
		t.Fatal("the fixture holds no hermes or python_json cases")
	}
	return &o
}

// PythonJSON writes what Python's json.dumps(json.loads(s),
// ensure_ascii=False) wrote for each recorded text.
func TestPythonJSONMatchesPython(t *testing.T) {
	for _, c := range loadOracle(t).PythonJSON {
		got, err := inference.PythonJSON([]byte(c.In))
		if err != nil || got != c.Out {
			t.Errorf("PythonJSON(%q) = %q, %v; Python wrote %q", c.In, got, err, c.Out)
		}
	}
}

// ParseToolCalls gives the tool calls (names and argument texts) vLLM's
// hermes parser gave for each recorded model output, and the content
// whenever the parse fails.
func TestParseToolCallsMatchesHermes(t *testing.T) {
	for _, c := range loadOracle(t).Hermes {
		content, calls := inference.ParseToolCalls(c.Output)
		if len(calls) != len(c.ToolCalls) {
			t.Errorf("%q: %d calls, vLLM %d", c.Output, len(calls), len(c.ToolCalls))
			continue
		}
		for i := range calls {
			if calls[i].Name != c.ToolCalls[i].Name || calls[i].Arguments != c.ToolCalls[i].Arguments {
				t.Errorf("%q: call %d %s(%s), vLLM %s(%s)", c.Output, i, calls[i].Name, calls[i].Arguments, c.ToolCalls[i].Name, c.ToolCalls[i].Arguments)
			}
		}
		want := ""
		if c.Content != nil {
			want = *c.Content
		}
		if content != want {
			t.Errorf("%q: content %q, vLLM %q", c.Output, content, want)
		}
	}
}
