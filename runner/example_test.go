package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/runner"
)

// lengthEnv is an embedder's own environment: one turn, rewarded 1 when
// the answer is at most maxWords words long.
type lengthEnv struct{ maxWords int }

func (e lengthEnv) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (e lengthEnv) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	reward := 0.0
	if len(strings.Fields(action.Content)) <= e.maxWords {
		reward = 1
	}
	return &envs.Step{Reward: reward, Terminated: true}, nil
}

// Run a pipeline from Go with an environment given as a value, on the
// built-in simulator, then read the committed Parquet back.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "trajflow-example")
	defer os.RemoveAll(dir)
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"question": "What is 2+3?"}`+"\n"+`{"question": "What is 4*5?"}`+"\n"), 0o644)

	cfg, err := config.Parse([]byte(`
source: {path: `+tasks+`}
prompt: {user: "Answer briefly: {question}"}
repeat: {n: 4, seed: 1}
generate: {endpoints: ["sim://"], model: sim}
env: {name: short-answer}
output: {dir: `+filepath.Join(dir, "out")+`}
run: {progress: 0}
`), "example.yaml", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: lengthEnv{maxWords: 1000}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ok rollouts:", sum.OK)

	rows, err := readback.Dir(filepath.Join(dir, "out", "data"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Groups are committed as they finish: sort for a stable listing.
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return a.Task.Index < b.Task.Index || a.Task.Index == b.Task.Index && a.RolloutIndex < b.RolloutIndex
	})
	for _, r := range rows[:2] {
		fmt.Println(r.Task.Index, r.RolloutIndex, r.Env, r.Status, r.Reward)
	}
	// Output:
	// ok rollouts: 8
	// 0 0 short-answer ok 1
	// 0 1 short-answer ok 1
}

// Check a config without creating anything: every problem at once, each
// naming where its key was set.
func ExampleCheck() {
	cfg, err := config.Decode([]byte(`
source: {path: tasks.jsonl}
repeat: {n: 0}
env: {name: maths}
`), "run.yaml", []string{"groups.keep=sometimes"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(runner.Check(cfg, runner.Options{}))
	// Output:
	// run.yaml: line 3: repeat.n: must be >= 1, got 0 (leave n out for the default, 1)
	// --set groups.keep=sometimes: groups.keep: "sometimes" is not one of all, nonzero_std, mean_in
	// run.yaml: line 4: env.name: unknown environment "maths" (have agent, grid, guess, http, math, nemo_gym_agent, none, sim, subprocess, tools)
}

func ExampleShardDir() {
	fmt.Println(runner.ShardDir("out/run", 3, 16))
	fmt.Println(runner.ShardDir("s3://bucket/runs/math", 0, 4))
	// Output:
	// out/run/shards/00003-of-00016
	// s3://bucket/runs/math/shards/00000-of-00004
}
