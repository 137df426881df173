package harness

import (
	"context"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"io"
	"sync"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/stages/repeat"
	"github.com/trajflow/trajflow/stages/template"
)

// LoadTasks reads and renders every task cfg's source selects, with
// trajflow's own source and template stages.
func LoadTasks(ctx context.Context, cfg *config.Config) ([]*pipeline.Task, error) {
	src, err := sources.Open(cfg.Source, sources.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = src.Close() }() // best effort: read only
	tmpl, err := template.New(cfg.Prompt)
	if err != nil {
		return nil, err
	}
	var out []*pipeline.Task
	for {
		t, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if err := tmpl.Render(t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
}

// Barrier is the batch-synchronous reference schedule, as NeMo RL's
// run_multi_turn_rollout and verl-agent's TrajectoryCollector run it:
// submit every active turn-k request of a batch, wait for all of them, step
// every environment, wait for all, repeat until the batch is done; then the
// next batch. It uses trajflow's own generation and environment stages (the
// same requests, the same client), only the schedule differs.
type Barrier struct {
	gen  *generate.Generator
	step *envstep.Stepper
	exp  *repeat.Expander
	rule groups.Rule
}

// NewBarrier builds the reference schedule for cfg over client and env.
func NewBarrier(cfg *config.Config, client inference.Client, env envs.Env) *Barrier {
	gen, err := generate.New(client, generate.Options{Model: cfg.Generate.Model, Params: cfg.Generate.Params, API: cfg.Generate.API, MaxSeqLenOf: cfg.Env.SeqLenOf()})
	if err != nil {
		panic(err) // the benchmarks' own configs
	}
	return &Barrier{
		gen:  gen,
		step: envstep.New(env, cfg.Env.Name, cfg.Env.Limits()),
		exp:  repeat.New(cfg.Repeat, cfg.Run.ID, cfg.Env.Name, cfg.Generate.Model),
		rule: groups.NewRule(cfg.Groups),
	}
}

// RunBatch runs the rollouts of one batch to the end, turn by turn with a
// barrier after every generation phase and every environment phase.
func (b *Barrier) RunBatch(ctx context.Context, rs []*pipeline.Rollout) error {
	if err := parallel(ctx, rs, func(r *pipeline.Rollout) error { return b.step.Reset(ctx, r) }); err != nil {
		return err
	}
	active := pending(rs)
	for len(active) > 0 {
		if err := parallel(ctx, active, func(r *pipeline.Rollout) error { return b.gen.Turn(ctx, r) }); err != nil {
			return err
		}
		active = pending(active)
		if err := parallel(ctx, active, func(r *pipeline.Rollout) error { _, err := b.step.Step(ctx, r); return err }); err != nil {
			return err
		}
		active = pending(active)
	}
	return nil
}

// Groups expands tasks into groups (attempt 0), runs them as one batch and
// applies the keep rule to each group.
func (b *Barrier) Groups(ctx context.Context, tasks []*pipeline.Task) ([]*pipeline.Group, error) {
	var rs []*pipeline.Rollout
	gs := make([]*pipeline.Group, len(tasks))
	for i, t := range tasks {
		g := b.exp.Expand(t, 0)
		gs[i] = &pipeline.Group{Key: g[0].GroupKey(), Rollouts: g}
		rs = append(rs, g...)
	}
	if err := b.RunBatch(ctx, rs); err != nil {
		return nil, err
	}
	for _, g := range gs {
		b.rule.Apply(g)
	}
	return gs, nil
}

// BatchResult is what a reference run did.
type BatchResult struct {
	Tasks, Rollouts, Batches, Kept int
}

// RunFixed runs tasks in batches of tasksPerBatch (keep all).
func (b *Barrier) RunFixed(ctx context.Context, tasks []*pipeline.Task, tasksPerBatch int) (BatchResult, error) {
	var res BatchResult
	for lo := 0; lo < len(tasks); lo += tasksPerBatch {
		hi := min(lo+tasksPerBatch, len(tasks))
		gs, err := b.Groups(ctx, tasks[lo:hi])
		if err != nil {
			return res, err
		}
		res.Batches++
		res.Tasks += hi - lo
		for _, g := range gs {
			res.Rollouts += len(g.Rollouts)
			if g.Kept {
				res.Kept++
			}
		}
	}
	return res, nil
}

// RunDynamic is dynamic sampling by whole-batch regeneration: batches of g
// fresh tasks until target groups are kept (the excess is discarded).
func (b *Barrier) RunDynamic(ctx context.Context, tasks []*pipeline.Task, g, target int) (BatchResult, error) {
	var res BatchResult
	for lo := 0; lo < len(tasks) && res.Kept < target; lo += g {
		hi := min(lo+g, len(tasks))
		gs, err := b.Groups(ctx, tasks[lo:hi])
		if err != nil {
			return res, err
		}
		res.Batches++
		res.Tasks += hi - lo
		for _, gr := range gs {
			res.Rollouts += len(gr.Rollouts)
			if gr.Kept {
				res.Kept++
			}
		}
	}
	if res.Kept < target {
		return res, fmt.Errorf("reference: %d tasks hold only %d kept groups of %d", len(tasks), res.Kept, target)
	}
	res.Kept = target
	return res, nil
}

func pending(rs []*pipeline.Rollout) []*pipeline.Rollout {
	var out []*pipeline.Rollout
	for _, r := range rs {
		if !r.Done() {
			out = append(out, r)
		}
	}
	return out
}

// parallel runs f on every rollout at once and waits for all.
func parallel(ctx context.Context, rs []*pipeline.Rollout, f func(*pipeline.Rollout) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(r); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
