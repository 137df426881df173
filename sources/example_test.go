package sources_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/sources"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "trajflow-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(path, []byte(`{"responses_create_params": {"input": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0.7}, "expected_answer": "4"}
{"question": "What is 3+3?", "expected_answer": "6"}
not json
{"question": "What is 4+4?", "expected_answer": "8"}
`), 0o644)

	r, err := sources.Open(sources.Config{Path: path, OnBadRow: "skip"}, sources.Options{
		OnReject: func(rej sources.Reject) error {
			fmt.Printf("rejected %s: %s\n", filepath.Base(rej.Where), rej.Reason)
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for {
		task, err := r.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("task %d: %d messages, params %v, answer %v\n",
			task.Index, len(task.Messages), task.Params, task.Fields["expected_answer"])
	}
	// Output:
	// task 0: 1 messages, params map[temperature:0.7], answer 4
	// task 1: 0 messages, params map[], answer 6
	// rejected tasks.jsonl:3: invalid JSON: invalid character 'o' in literal null (expecting 'u')
	// task 3: 0 messages, params map[], answer 8
}

func ExampleShard_Resolve() {
	env := map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}
	s, err := sources.Shard{Auto: true}.Resolve(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("shard %d of %d from %s\n", s.Index, s.Count, s.From)
	// Output: shard 2 of 4 from SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=4
}
