package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/analyze"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// EvalFile is an evaluation's results in its folder (OUTPUT/eval/v-NNNNNN).
const EvalFile = "eval.json"

// evalDir is the folder of the evaluation at version v.
func evalDir(out string, v int64) string {
	return filepath.Join(out, schema.EvalDir, fmt.Sprintf("v-%06d", v))
}

// evaluator runs serve.eval: at each policy version that is a multiple of
// every, one run of the evaluation set (runner.Run, continuous with a
// policy pinned to that version: its requests all carry it), into its
// own folder, never into the training steps. The rule at a weight
// update: a pause (the trainer's first move before it changes the
// weights) waits for the evaluation running, so that it finishes on the
// weights it started on; the trainer waits. Results are written beside
// the run (EvalFile) and kept for the status.
type evaluator struct {
	every int64
	cfg   *config.Config // the evaluation run's
	out   string         // the output directory
	logf  func(format string, args ...any)
	run   func(ctx context.Context, cfg *config.Config, opts runner.Options) error

	mu      sync.Mutex
	ctx     context.Context // the service's
	running *evalRun
	results []client.EvalResult
	wg      sync.WaitGroup
}

// evalRun is an evaluation in flight.
type evalRun struct {
	version int64
	done    chan struct{}
}

// newEvaluator returns the evaluator of cfg's serve.eval (nil when unset):
// the evaluation run's config is cfg's with the evaluation's source and
// samples, every group kept, no target, no progress line and no metrics
// endpoint of its own.
func newEvaluator(ctx context.Context, cfg *config.Config, logf func(string, ...any)) *evaluator {
	e := cfg.Serve.Eval
	if e == nil {
		return nil
	}
	ec := *cfg
	ec.Source = e.Source
	ec.Repeat.N = e.N
	ec.Groups = groups.Config{}
	ec.Groups.SetDefaults() // keep all, no target
	ec.Output.Filtered = false
	ec.Run.Progress = 0
	ec.Run.MetricsAddr = ""
	ec.Run.ID = ""
	ec.Serve.Eval = nil
	return &evaluator{every: int64(e.Every), cfg: &ec, out: cfg.Output.Dir, logf: logf, ctx: ctx, run: func(ctx context.Context, cfg *config.Config, opts runner.Options) error {
		_, err := runner.Run(ctx, cfg, opts)
		return err
	}}
}

// due reports whether version v is evaluated.
func (e *evaluator) due(v int64) bool {
	return v > 0 && v%e.every == 0
}

// onVersion starts the evaluation of version v when it is due and has no
// result yet.
func (e *evaluator) onVersion(v int64) {
	if e == nil || !e.due(v) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil && e.running.version == v || slices.ContainsFunc(e.results, func(r client.EvalResult) bool { return r.Version == v }) {
		return
	}
	r := &evalRun{version: v, done: make(chan struct{})}
	e.running = r
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(r.done)
		res, err := e.evaluate(v)
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.running == r {
			e.running = nil
		}
		if err != nil {
			if e.ctx.Err() == nil {
				e.logf("evaluation at policy version %d: %v", v, err)
			}
			return
		}
		e.results = append(e.results, res)
		e.logf("evaluation at policy version %d: pass@1 %.4f, pass@%d %.4f, mean reward %.4f over %d tasks (%s)", v, res.PassAt1, res.K, res.PassAtK, res.MeanReward, res.Tasks, res.Dir)
	}()
}

// EvalPriority is the scheduling priority of an evaluation's requests
// under generate.priority: auto: ahead of every training request (0 and
// up; lower first), so that the evaluation, which a pause waits for, is
// not queued behind the training the fleet is busy with.
const EvalPriority = -1

// evaluate runs the evaluation set at version v and writes its results.
func (e *evaluator) evaluate(v int64) (client.EvalResult, error) {
	cfg := *e.cfg
	dir := evalDir(e.out, v)
	cfg.Output.Dir = dir
	cfg.Run.ID = fmt.Sprintf("eval-v%d", v)
	start := time.Now()
	prio := EvalPriority
	err := e.run(e.ctx, &cfg, runner.Options{Stderr: io.Discard, Continuous: &runner.Continuous{Policy: generate.NewPolicy(v), Priority: &prio}})
	if err != nil {
		return client.EvalResult{}, err
	}
	m, err := analyze.Stats(e.ctx, []string{dir}, io.Discard, analyze.StatsOptions{})
	if err != nil {
		return client.EvalResult{}, err
	}
	res := client.EvalResult{Version: v, Dir: dir, Rows: m.Rows, MeanReward: m.Reward.Mean, Seconds: time.Since(start).Seconds()}
	for _, a := range m.AtK {
		if a.K == 1 {
			res.PassAt1, res.Tasks = a.PassAtK, a.Tasks
		}
		if a.K >= res.K {
			res.K, res.PassAtK = a.K, a.PassAtK
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return res, err
	}
	if err := durable.WriteFile(filepath.Join(dir, EvalFile), append(b, '\n'), 0o644); err != nil {
		return res, err
	}
	return res, nil
}

// wait waits for the evaluation running, if any (a pause: the trainer is
// about to change the weights).
func (e *evaluator) wait(ctx context.Context) error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	r := e.running
	e.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the evaluation at policy version %d: %w", r.version, ctx.Err())
	}
}

// status is the evaluations' part of the status.
func (e *evaluator) status() *client.EvalStatus {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &client.EvalStatus{Every: e.every, Results: slices.Clone(e.results)}
	if e.running != nil {
		st.Running = &e.running.version
	}
	return st
}

// load reads the results of the evaluations written before a restart.
func (e *evaluator) load() error {
	if e == nil {
		return nil
	}
	paths, err := filepath.Glob(filepath.Join(e.out, schema.EvalDir, "v-*", EvalFile))
	if err != nil {
		return err
	}
	slices.Sort(paths)
	var errs []error
	for _, p := range paths {
		var r client.EvalResult
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		e.results = append(e.results, r)
	}
	return errors.Join(errs...)
}

// close waits for an evaluation in flight to end (the service's context
// is cancelled before).
func (e *evaluator) close() {
	if e != nil {
		e.wg.Wait()
	}
}
