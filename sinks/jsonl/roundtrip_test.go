package jsonl_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/jsonl"
	"github.com/trajflow/trajflow/sources"
)

func readTasks(t *testing.T, path string) []*pipeline.Task {
	t.Helper()
	cfg := sources.Config{Path: path}
	cfg.SetDefaults()
	rd, err := sources.Open(cfg, sources.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*pipeline.Task
	for {
		task, err := rd.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, task)
	}
}

// A trajflow JSONL output fed back as input renders the same prompts: the
// same messages, tools and request parameters for every row.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	rows := `{"responses_create_params":{"input":"What is 7?","instructions":"Answer with a number.","temperature":0.5,"max_output_tokens":64},"expected_answer":"7","agent_ref":{"name":"math"}}
{"responses_create_params":{"input":[{"role":"system","content":"Be terse."},{"role":"user","content":[{"type":"input_text","text":"Deposit 7."}]}],"tools":[{"type":"function","name":"deposit","parameters":{"type":"object"},"strict":true}],"reasoning":{"effort":"low"}},"id":"b"}
{"messages":[{"role":"user","content":"Hi"}],"question":"greet"}
`
	if err := os.WriteFile(in, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks := readTasks(t, in)
	if len(tasks) != 3 {
		t.Fatalf("%d tasks", len(tasks))
	}
	out := filepath.Join(dir, "out.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	w := jsonl.New(f)
	for _, task := range tasks {
		msgs := append([]pipeline.Message{}, task.Messages...)
		msgs = append(msgs,
			pipeline.Message{Role: "assistant", Turn: 1, Content: "<think>hm</think>", ToolCalls: []pipeline.ToolCall{{ID: "c1", Type: "function", Name: "deposit", Arguments: `{"amount":7}`}}},
			pipeline.Message{Role: "tool", Turn: 1, ToolCallID: "c1", Content: `{"balance":7}`},
			pipeline.Message{Role: "assistant", Turn: 2, Content: "7"})
		r := &pipeline.Rollout{Task: task, RolloutIndex: 1, NoSeed: true, Messages: msgs, Reward: 1, Status: pipeline.StatusOK, PromptTokens: 9, CompletionTokens: 3}
		if err := w.WriteGroup(context.Background(), &pipeline.Group{Rollouts: []*pipeline.Rollout{r}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	again := readTasks(t, out)
	if len(again) != len(tasks) {
		t.Fatalf("%d tasks read back, want %d", len(again), len(tasks))
	}
	for i := range tasks {
		a, b := tasks[i], again[i]
		if !reflect.DeepEqual(a.Messages, b.Messages) || !reflect.DeepEqual(a.Params, b.Params) || len(a.Tools) != len(b.Tools) {
			t.Errorf("row %d: read back\n%+v %v %d tools\nwant\n%+v %v %d tools", i, b.Messages, b.Params, len(b.Tools), a.Messages, a.Params, len(a.Tools))
		}
		for k := range a.Tools {
			if string(a.Tools[k]) != string(b.Tools[k]) {
				t.Errorf("row %d tool %d: %s, want %s", i, k, b.Tools[k], a.Tools[k])
			}
		}
		for _, key := range []string{"expected_answer", "agent_ref", "id", "question"} {
			if !reflect.DeepEqual(a.Fields[key], b.Fields[key]) {
				t.Errorf("row %d: field %s = %v, want %v", i, key, b.Fields[key], a.Fields[key])
			}
		}
	}
}
