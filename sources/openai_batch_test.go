package sources

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestParseBatchLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		// rowErr: a bad row (on_bad_row); invalid: an error row saying so.
		rowErr, invalid string
		api, content    string
		params          map[string]any
	}{
		{name: "chat", line: `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}}`,
			api: "chat", content: "hi", params: map[string]any{"max_tokens": "5"}},
		{name: "completions", line: `{"custom_id":"b","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"once upon"}}`,
			api: "completions", content: "once upon", params: map[string]any{"prompt": "once upon"}},
		{name: "no method", line: `{"custom_id":"c","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}]}}`, api: "chat", content: "x"},
		{name: "other url", line: `{"custom_id":"d","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}`, invalid: `url "/v1/embeddings"`},
		{name: "no url", line: `{"custom_id":"d","method":"POST","body":{"input":"x"}}`, invalid: `url (missing)`},
		{name: "stream", line: `{"custom_id":"e","method":"POST","url":"/v1/chat/completions","body":{"stream":true,"messages":[{"role":"user","content":"x"}]}}`, invalid: "body.stream: true"},
		{name: "GET", line: `{"custom_id":"f","method":"GET","url":"/v1/chat/completions","body":{}}`, invalid: "method GET"},
		{name: "no messages", line: `{"custom_id":"g","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`, invalid: "body.messages"},
		{name: "empty messages", line: `{"custom_id":"g","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`, invalid: "no messages"},
		{name: "prompt list", line: `{"custom_id":"h","method":"POST","url":"/v1/completions","body":{"prompt":[1,2]}}`, invalid: "body.prompt: want a string"},
		{name: "body string", line: `{"custom_id":"i","method":"POST","url":"/v1/chat/completions","body":"x"}`, invalid: "body: want an object"},
		{name: "no custom_id", line: `{"method":"POST","url":"/v1/chat/completions","body":{}}`, rowErr: "custom_id: want a non-empty string"},
		{name: "numeric custom_id", line: `{"custom_id":7,"url":"/v1/chat/completions","body":{}}`, rowErr: "custom_id"},
		{name: "not JSON", line: `{"custom_id":"a",`, rowErr: "invalid JSON"},
		{name: "array", line: `[1]`, rowErr: "want an OpenAI Batch request object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := parseBatchLine("b.jsonl:3", 2, []byte(tc.line))
			if tc.rowErr != "" {
				var re *RowError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.rowErr) || re.Where != "b.jsonl:3" {
					t.Fatalf("err %v, want a bad row saying %q", err, tc.rowErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.invalid != "" {
				if !strings.Contains(task.Invalid, tc.invalid) || task.Messages != nil || task.CustomID == "" {
					t.Fatalf("Invalid %q, want it to say %q", task.Invalid, tc.invalid)
				}
				return
			}
			if task.Invalid != "" || task.API != tc.api || len(task.Messages) == 0 || task.Messages[len(task.Messages)-1].Content != tc.content {
				t.Fatalf("task %+v", task)
			}
			if _, ok := task.Params["model"]; ok {
				t.Fatalf("the body's model became a param: %v", task.Params)
			}
			for k, v := range tc.params {
				if got := task.Params[k]; got == nil || pipeline.JSONKind(got) == "" || strings.Trim(string(mustJSON(t, got)), `"`) != v {
					t.Fatalf("param %s = %v, want %v", k, got, v)
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := pipeline.MarshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatchDuplicateCustomID(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.jsonl")
	l := func(id string) string {
		return `{"custom_id":"` + id + `","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"` + id + `"}]}}` + "\n"
	}
	os.WriteFile(p, []byte(l("a")+l("b")+"\n"+l("c")+l("b")), 0o644)
	// The duplicate is found even past the rows a window selects.
	r, err := Open(Config{Path: p, Format: FormatOpenAIBatch, Shard: Shard{Count: 2, Index: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for {
		task, err := r.Next(context.Background())
		if err == io.EOF {
			t.Fatal("read to the end past a duplicate custom_id")
		}
		if err != nil {
			if !strings.Contains(err.Error(), `in.jsonl:5: custom_id "b" is already on line 2`) {
				t.Fatal(err)
			}
			break
		}
		got = append(got, task.CustomID)
	}
	if strings.Join(got, ",") != "b" {
		t.Fatalf("read %v before the duplicate", got)
	}
}

// FuzzParseBatchLine: any line is a bad row or a task with its custom_id;
// a task that can be sent has an API and a prompt; nothing panics.
func FuzzParseBatchLine(f *testing.F) {
	for _, s := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"b","url":"/v1/completions","body":{"prompt":"p","n":2}}`,
		`{"custom_id":"c","url":"/v1/chat/completions","body":{"stream":true}}`,
		`{"custom_id":"d","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"type":"function","function":{"name":"f"}}]}}`,
		`{"custom_id":"","url":1}`, `null`, `{}`, "{\"custom_id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		task, err := parseBatchLine("f.jsonl:1", 0, line)
		if err != nil {
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("%T %v: want a RowError", err, err)
			}
			return
		}
		if task.CustomID == "" {
			t.Fatal("a task without its custom_id")
		}
		if task.Invalid == "" && (task.API != "chat" && task.API != "completions" || len(task.Messages) == 0) {
			t.Fatalf("a sendable task with API %q and %d messages", task.API, len(task.Messages))
		}
		ids := batchIDs{}
		if err := ids.see("f.jsonl", 1, line); err != nil {
			t.Fatal(err)
		}
		if err := ids.see("f.jsonl", 2, line); err == nil {
			t.Fatal("the same custom_id twice was not refused")
		}
	})
}
