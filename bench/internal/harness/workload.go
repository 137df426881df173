package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
)

// Workload is one benchmark workload: the tasks, the group size, and the
// simulator settings that decide its lengths, turns and delays.
type Workload struct {
	Name string
	// Tasks in the input file; N rollouts per task.
	Tasks, N int
	// Preset is the simulator's length preset (short, reasoning, agent).
	Preset string
	// MinTurns, MaxTurns: turns per trajectory (0: the preset's).
	MinTurns, MaxTurns int
	// EnvDelay is the median env delay per turn before the time scale.
	EnvDelay time.Duration
	// ObsTokens is the median observation length (0: the preset's).
	ObsTokens int
	// Keep is the simulator's mixed-group probability (-1: off).
	Keep float64
	// Target is groups.target K (0: every group, keep all).
	Target int
	// MaxTokens is the max_tokens request parameter (0: the preset's cap).
	MaxTokens int
	// BatchRollouts is the reference schedule's batch size in rollouts
	// (non-target workloads).
	BatchRollouts int
	// RefGroups are the reference schedule's groups per batch, one
	// reference run each (target workloads): K and 3K.
	RefGroups []int
}

// Bench are the settings shared by every workload of a benchmark run.
type Bench struct {
	// Seed is the simulator's seed; RepeatSeed trajflow's repeat.seed.
	Seed, RepeatSeed int64
	// TimeScale multiplies every simulated delay.
	TimeScale float64
	// Capacity is B.
	Capacity int
	// Concurrency is generate.concurrency (and the reference's bound on
	// requests in flight); EnvConcurrency is env.concurrency.
	Concurrency, EnvConcurrency int
	// MaxInflight is groups.max_inflight (0: trajflow's default).
	MaxInflight int
	// BatchRows and FileRows are output.batch_rows and output.file_rows
	// (0: trajflow's defaults).
	BatchRows, FileRows int
}

// SimOptions are the simulator options of w under b.
func (b Bench) SimOptions(w Workload) sim.Options {
	return sim.Options{
		Seed: b.Seed, Preset: w.Preset, TimeScale: b.TimeScale, Capacity: b.Capacity,
		MinTurns: w.MinTurns, MaxTurns: w.MaxTurns, EnvDelay: w.EnvDelay, ObsTokens: w.ObsTokens,
		Keep: w.Keep, GroupSize: w.N, BaseSeed: b.RepeatSeed, ToolCallRate: -1,
	}
}

// WriteTasks writes n arithmetic tasks as JSONL to path: {"id", "question",
// "expected_answer"}, each question distinct.
func WriteTasks(path string, n int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for i := range n {
		a, c := 3+i%97, 5+(i/97)%89
		row := map[string]any{
			"id":              i,
			"question":        fmt.Sprintf("Task %d: what is %d + %d?", i, a, c),
			"expected_answer": fmt.Sprint(a + c),
		}
		if err := enc.Encode(row); err != nil {
			_ = f.Close() // best effort: the error above is returned
			return err
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close() // best effort: the error above is returned
		return err
	}
	return f.Close()
}

// Config is trajflow's run config for w: tasks from tasksPath, the sim
// environment, generation against endpoint, output under outDir.
func (b Bench) Config(w Workload, tasksPath, endpoint, outDir string) (*config.Config, error) {
	cfg := &config.Config{}
	cfg.Source.Path = tasksPath
	cfg.Source.Limit = int64(w.Tasks)
	cfg.Prompt.User = "{question}"
	cfg.Repeat.N = w.N
	cfg.Repeat.Seed = b.RepeatSeed
	cfg.Generate.Endpoints = []string{endpoint}
	cfg.Generate.Model = "sim"
	cfg.Generate.Concurrency = b.Concurrency
	cfg.Generate.Params = map[string]any{"return_token_ids": true}
	if w.MaxTokens > 0 {
		cfg.Generate.Params["max_tokens"] = w.MaxTokens
	}
	cfg.Env.Name = "sim"
	cfg.Env.MaxTurns = 1000
	cfg.Env.Concurrency = b.EnvConcurrency
	cfg.Groups.Keep = "all"
	if w.Target > 0 {
		cfg.Groups.Keep = "nonzero_std"
		cfg.Groups.Target = w.Target
		cfg.Groups.OnTarget = "cancel"
		cfg.Groups.Resample = "next_task"
	}
	cfg.Groups.MaxInflight = b.MaxInflight
	cfg.Output.Collate.BatchRows, cfg.Output.Parquet.FileRows = b.BatchRows, b.FileRows
	cfg.Output.Dir = outDir
	cfg.Run.Progress = config.Duration(time.Hour)
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	return cfg, nil
}
