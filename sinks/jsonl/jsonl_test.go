package jsonl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/jsonl"
	"github.com/trajflow/trajflow/stages/collate"
)

func TestRecordsAndGroupsGiveSameLines(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	ctx := context.Background()
	var fromGroups, fromRecords bytes.Buffer
	wg, wr := jsonl.New(&fromGroups), jsonl.New(&fromRecords)
	wr.Overrides(nil, false) // the groups' rollouts add no seed to their params
	c := collate.New(alloc, 4)
	defer c.Release()
	for task := range int64(3) {
		g := pipelinetest.Group(task, 3, 200)
		if err := wg.WriteGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
		if rec := c.Add(g); rec != nil {
			err := wr.Write(ctx, rec)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if rec := c.Flush(); rec != nil {
		err := wr.Write(ctx, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := wg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if fromGroups.String() != fromRecords.String() {
		t.Errorf("lines differ:\ngroups:\n%s\nrecords:\n%s", fromGroups.String(), fromRecords.String())
	}

	sc := bufio.NewScanner(&fromGroups)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if l["_ng_task_index"] != float64(n/3) || l["_ng_rollout_index"] != float64(n%3) {
			t.Errorf("line %d keys = %v, %v", n, l["_ng_task_index"], l["_ng_rollout_index"])
		}
		input := l["responses_create_params"].(map[string]any)["input"].([]any)
		output := l["response"].(map[string]any)["output"].([]any)
		if len(input) != 2 || len(output) == 0 {
			t.Errorf("line %d: %d input, %d output items, want 2 and some", n, len(input), len(output))
		}
		for _, item := range output {
			switch typ := item.(map[string]any)["type"]; typ {
			case "message", "function_call", "function_call_output", "reasoning":
			default:
				t.Errorf("line %d: output item of type %v", n, typ)
			}
		}
		if l["trajflow"].(map[string]any)["status"] == nil || l["reward"] == nil {
			t.Errorf("line %d: no trajflow.status or reward: %v", n, l)
		}
		n++
	}
	if n != 9 {
		t.Errorf("%d lines, want 9", n)
	}
}

func ExampleNewLine() {
	r := &pipeline.Rollout{
		Task:         &pipeline.Task{Index: 7, Raw: json.RawMessage(`{"question":"1+1"}`)},
		RolloutIndex: 2,
		NoSeed:       true, // no seed was sent: none is added
		Reward:       1,
		Status:       pipeline.StatusOK,
		Messages: []pipeline.Message{
			{Role: "user", Content: "1+1?"},
			{Role: "assistant", Content: "2", Turn: 1},
		},
	}
	w := jsonl.New(os.Stdout)
	_ = w.WriteGroup(context.Background(), &pipeline.Group{Rollouts: []*pipeline.Rollout{r}})
	_ = w.Close(context.Background())
	fmt.Println("done")
	// Output:
	// {"_ng_rollout_index":2,"_ng_task_index":7,"question":"1+1","response":{"created_at":0,"id":"resp_","incomplete_details":null,"model":"","object":"response","output":[{"content":[{"annotations":[],"text":"2","type":"output_text"}],"id":"msg_1","role":"assistant","status":"completed","type":"message"}],"parallel_tool_calls":true,"status":"completed","tool_choice":"auto","tools":[],"usage":{"input_tokens":0,"input_tokens_details":{"cached_tokens":null},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":null},"total_tokens":0}},"responses_create_params":{"input":[{"content":"1+1?","role":"user","type":"message"}]},"reward":1,"trajflow":{"attempt":0,"seed":0,"status":"ok","num_turns":0}}
	// done
}
