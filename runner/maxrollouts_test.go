package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
)

// activeEnv counts the trajectories between their reset and their last
// step, and the most at once.
type activeEnv struct{ now, most atomic.Int64 }

func (e *activeEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	n := e.now.Add(1)
	for {
		m := e.most.Load()
		if n <= m || e.most.CompareAndSwap(m, n) {
			break
		}
	}
	return &envs.Reset{}, nil
}

func (e *activeEnv) Step(_ context.Context, r *pipeline.Rollout, _ pipeline.Message) (*envs.Step, error) {
	time.Sleep(2 * time.Millisecond)
	if r.NumTurns < 2 {
		return &envs.Step{Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: "again"}}}, nil
	}
	e.now.Add(-1)
	return &envs.Step{Reward: 1, Terminated: true}, nil
}

// TestMaxRollouts: groups.max_rollouts bounds the rollouts in flight, as
// NeMo Gym's num_samples_in_parallel bounds its samples, however many
// requests generate.concurrency allows.
func TestMaxRollouts(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	var b strings.Builder
	for i := range 16 {
		fmt.Fprintf(&b, "{\"question\": \"q%d\"}\n", i)
	}
	os.WriteFile(tasks, []byte(b.String()), 0o644)
	most := func(sets ...string) int64 {
		env := &activeEnv{}
		cfg, err := config.Parse([]byte(`
source: {path: `+tasks+`}
prompt: {user: "{question}"}
repeat: {n: 4}
generate: {endpoints: ["sim://"], model: sim, concurrency: 32}
env: {name: count, concurrency: 32}
output: {dir: `+filepath.Join(dir, fmt.Sprint("out", len(sets)))+`}
run: {progress: 0}
`), "cfg.yaml", sets)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := runner.Run(context.Background(), cfg, runner.Options{Env: env})
		if err != nil || sum.OK != 64 {
			t.Fatalf("run: %v, summary %+v", err, sum)
		}
		return env.most.Load()
	}
	if m := most("groups.max_rollouts=3"); m > 3 || m < 1 {
		t.Fatalf("max_rollouts 3: %d rollouts in flight at once", m)
	}
	if m := most(); m <= 3 {
		t.Fatalf("no max_rollouts: at most %d rollouts in flight at once; the bound shows nothing", m)
	}
}
