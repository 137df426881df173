// Command serve measures generation that feeds an asynchronous trainer
// step after step: S consecutive training steps of K kept groups of n
// (dynamic sampling at a given keep rate) on a simulated server, with a
// simulated trainer that takes a fixed time per step and then updates the
// policy (pause, new version, resume). It compares
//
//   - continuous generation across steps (one run under a generate.Policy
//     and a groups.Staleness gate, max_staleness 1, the target raised to
//     S·K), in both pause modes, abort and keep;
//   - one `trajflow run` per step (each resumes the output directory with
//     the target raised by K, after the trainer's step; output.filtered on,
//     so that a resumed run does not sample the dropped tasks again);
//   - the batch-synchronous reference (whole-batch regeneration of K
//     groups until K are kept, then the trainer's step);
//   - the `trajflow serve` process itself (a child process, serve.max_staleness
//     1, step_groups K) fed by a trainer over HTTP with the Go client:
//     take a step, train, acknowledge, pause, post a new policy version,
//     resume; one row per -http-train ratio (below 1 generation-bound,
//     above training-bound); -jump moves the version on by more than
//     one at each update, -api chat generates without token ids;
//
// and reports the fleet's busy fraction, tokens generated ÷ needed, the time
// per step against the ideal and the staleness of the groups consumed; the
// HTTP rows also the fleet's busy fraction after the first step, the
// trainer's idle fraction, tokens generated ÷ those of the groups the
// service finished, the largest staleness and the groups served twice.
// -priority on,off gives each trajflow schedule a row with
// generate.priority auto and groups.cancel_undecided, and one with both
// off.
//
//	go run ./bench/serve                 # K=64, n=8, 10 steps, keep 0.3/0.5/0.7
//	go run ./bench/serve -keep 0.5       # one keep rate
//	go run ./bench/serve -schedules http -keep 0.5 -priority on,off
//	go run ./bench/serve -schedules http -keep 0.5 -jump 2 -api chat  # versions moved on by 2, answers without token ids
//	go run ./bench/serve -schedules http -keep 0.5 -drift  # acks carry the trainer's logprobs (drift measured)
//	go run ./bench/serve -schedules http -keep 0.5 -features off,on  # drift, eval and routed experts off, then on
//	go run ./bench/serve -schedules http -keep 0.5 -features off,drift,eval,routes,on  # each apart too
//	go run ./bench/serve -quick          # smoke run, seconds
//
// BENCHMARKS.md explains every column.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

func main() { harness.Main(run) }

// Row is one schedule on one workload.
type Row struct {
	Workload string `json:"workload"`
	Schedule string `json:"schedule"`
	Steps    int    `json:"steps"`
	Kept     int    `json:"kept_groups"`
	// TotalS runs from the start to the end of the last step's training.
	TotalS float64 `json:"t_total_s"`
	// StepS = TotalS / Steps; IdealStepS = max(the ideal generation time
	// of one step's work, the trainer's step and update).
	StepS      float64 `json:"t_step_s"`
	IdealStepS float64 `json:"t_step_ideal_s"`
	Efficiency float64 `json:"efficiency"`
	// BusyFrac is the simulator's busy time over TotalS.
	BusyFrac float64 `json:"fleet_busy_fraction"`
	// Needed are the decode tokens of the shortest in-order prefix of
	// tasks holding S·K kept groups; Generated what the server decoded.
	Needed    int64   `json:"tokens_needed"`
	Generated int64   `json:"tokens_generated"`
	Ratio     float64 `json:"generated_over_needed"`
	// Staleness counts the groups consumed by the trainer's version at
	// consumption minus the group's min_policy_version: [0, 1, ≥2].
	Staleness [3]int `json:"staleness"`
	Note      string `json:"note,omitempty"`
	// Priority is generate.priority auto with groups.cancel_undecided
	// ("on") or both off ("off"); "" for the barrier reference.
	Priority string `json:"priority,omitempty"`

	// The serve-over-HTTP rows' own figures. BusyAfterFirst is the
	// simulator's busy fraction from the trainer's first step to its
	// last; TrainerIdle the trainer's time waiting for steps 2..S over
	// its loop from the first step on. Finished are the decode tokens of
	// every group the service finished (kept, served or queued; dropped
	// by the keep rule), Ratio then generated ÷ Finished; Served the
	// decode tokens of the groups served. StaleMax is the largest
	// (trainer's version − the step's oldest policy version);
	// Duplicates the groups served twice.
	BusyAfterFirst float64 `json:"fleet_busy_after_first_step,omitempty"`
	TrainerIdle    float64 `json:"trainer_idle_fraction,omitempty"`
	Finished       int64   `json:"tokens_of_groups_finished,omitempty"`
	Served         int64   `json:"tokens_of_groups_served,omitempty"`
	StaleMax       int64   `json:"staleness_max,omitempty"`
	Duplicates     int     `json:"duplicates,omitempty"`
	// Waits are the trainer's waits for each step, in seconds.
	Waits []float64 `json:"trainer_waits_s,omitempty"`
	// Queued are the kept groups queued when the trainer asked for each
	// step (GET /v1/status just before): K or more, the step's wait is
	// the service making and sending it.
	Queued []int `json:"queued_at_request,omitempty"`
}

type options struct {
	bench      harness.Bench
	k, n       int
	steps      int
	keeps      []float64
	trainRatio float64
	schedules  map[string]bool
	jsonPath   string
	workdir    string
	maxTokens  int
	preset     string
	// priorities are -priority's settings (on, off); httpTrains the
	// trainer's step in multiples of a step's ideal generation time, one
	// serve-over-HTTP row each; pause the HTTP trainer's pause mode;
	// commit the child's serve.commit_interval (0: its default).
	priorities []string
	httpTrains []float64
	pause      string
	commit     time.Duration
	// jump is how many versions the HTTP trainer moves the policy on at
	// each update; api the serve child's generate.api (tokens, or chat:
	// answers without token ids, as a server not asked for them gives).
	jump int
	api  string
	// drift: the HTTP trainer acks with its logprobs (the engine's own).
	drift bool
	// features are -features' settings for the HTTP rows, one row each,
	// so that all are measured in one session.
	features []features
}

// features are the serve features an HTTP row turns on: the trainer's
// logprobs with each ack (drift), serve.eval every 2 versions, and
// generate.routed_experts from the simulator's MoE model.
type features struct{ drift, eval, routes bool }

// parseFeatures reads one -features setting: off, on (all three), or
// some of drift, eval and routes joined by "+".
func parseFeatures(s string) (features, error) {
	switch s {
	case "off":
		return features{}, nil
	case "on":
		return features{true, true, true}, nil
	}
	var f features
	for _, name := range strings.Split(s, "+") {
		switch name {
		case "drift":
			f.drift = true
		case "eval":
			f.eval = true
		case "routes":
			f.routes = true
		default:
			return f, fmt.Errorf("%q is not off, on, or drift, eval and routes joined by +", s)
		}
	}
	return f, nil
}

// any reports whether a feature is on.
func (f features) any() bool { return f.drift || f.eval || f.routes }

// String names the features on, as the row's schedule says them.
func (f features) String() string {
	var on []string
	if f.drift {
		on = append(on, "acks with logprobs")
	}
	if f.eval {
		on = append(on, "eval every 2 versions")
	}
	if f.routes {
		on = append(on, "routed experts")
	}
	return strings.Join(on, ", ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: a tiny workload, seconds")
	scale := fs.Float64("scale", 0, "simulator time scale (default 0.02; quick 0.05)")
	capacity := fs.Int("capacity", 0, "batch size B (default 256; quick 32)")
	seed := fs.Int64("seed", 7, "simulator seed")
	k := fs.Int("k", 0, "kept groups per training step K (default 64; quick 8)")
	n := fs.Int("n", 0, "rollouts per group (default 8; quick 4)")
	steps := fs.Int("steps", 0, "training steps (default 10; quick 3)")
	keeps := fs.String("keep", "", "comma-separated keep rates (default 0.3,0.5,0.7; quick 0.5)")
	trainRatio := fs.Float64("train", 1, "the trainer's time per step, in multiples of one step's ideal generation time")
	scheds := fs.String("schedules", "abort,keep,run,reference,http", "comma-separated schedules: abort, keep (continuous), run (one run per step), reference, http (the trajflow serve process over HTTP)")
	prios := fs.String("priority", "on", "comma-separated: on (generate.priority auto, groups.cancel_undecided true), off (both off); one row each")
	httpTrains := fs.String("http-train", "0.5,2", "the HTTP trainer's step in multiples of one step's ideal generation time, comma-separated: below 1 generation-bound, above training-bound")
	pause := fs.String("pause", "abort", "the HTTP trainer's pause mode (abort, keep)")
	commit := fs.Duration("commit", 0, "the serve child's serve.commit_interval (default: serve's, 500ms; quick 50ms)")
	jump := fs.Int("jump", 1, "versions the HTTP trainer moves the policy on at each update (2: a jump past max_staleness 1)")
	api := fs.String("api", "tokens", "the serve child's generate.api: tokens, or chat (answers without token ids)")
	drift := fs.Bool("drift", false, "the HTTP trainer acknowledges each step with its logprobs of the step's tokens (the engine's own: drift 0)")
	feats := fs.String("features", "off", "comma-separated, for the HTTP rows: off, on (acks with the trainer's logprobs, serve.eval every 2 versions, generate.routed_experts on a MoE-shaped simulator), or some of drift, eval and routes joined by +; one row each")
	jsonPath := fs.String("json", "", "also write the rows as JSON to this file")
	workdir := fs.String("workdir", "", "directory for tasks and outputs (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := options{bench: harness.Bench{Seed: *seed, RepeatSeed: 1000, TimeScale: 0.02, Capacity: 256},
		k: 64, n: 8, steps: 10, keeps: []float64{0.3, 0.5, 0.7}, trainRatio: *trainRatio,
		schedules: map[string]bool{}, jsonPath: *jsonPath, maxTokens: 8192, preset: "reasoning"}
	if *quick {
		o.bench.TimeScale, o.bench.Capacity = 0.05, 32
		o.k, o.n, o.steps, o.keeps, o.maxTokens, o.preset = 8, 4, 3, []float64{0.5}, 0, "short"
		o.commit = 50 * time.Millisecond
	}
	for _, p := range strings.Split(*prios, ",") {
		p = strings.TrimSpace(p)
		if p != "on" && p != "off" {
			fmt.Fprintf(stderr, "serve: -priority: %q is not on or off\n", p)
			return 2
		}
		o.priorities = append(o.priorities, p)
	}
	for _, t := range strings.Split(*httpTrains, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
		if err != nil || f <= 0 {
			fmt.Fprintf(stderr, "serve: -http-train: %q is not a positive ratio\n", t)
			return 2
		}
		o.httpTrains = append(o.httpTrains, f)
	}
	if *pause != "abort" && *pause != "keep" {
		fmt.Fprintf(stderr, "serve: -pause: %q is not abort or keep\n", *pause)
		return 2
	}
	o.pause = *pause
	if *jump < 1 {
		fmt.Fprintf(stderr, "serve: -jump: %d, want at least 1\n", *jump)
		return 2
	}
	if *api != "tokens" && *api != "chat" {
		fmt.Fprintf(stderr, "serve: -api: %q is not tokens or chat\n", *api)
		return 2
	}
	o.jump, o.api, o.drift = *jump, *api, *drift
	for _, s := range strings.Split(*feats, ",") {
		f, err := parseFeatures(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(stderr, "serve: -features: %v\n", err)
			return 2
		}
		o.features = append(o.features, f)
	}
	if *commit > 0 {
		o.commit = *commit
	}
	if *scale > 0 {
		o.bench.TimeScale = *scale
	}
	if *capacity > 0 {
		o.bench.Capacity = *capacity
	}
	for _, v := range []struct {
		flag string
		val  int
		dst  *int
	}{{"-k", *k, &o.k}, {"-n", *n, &o.n}, {"-steps", *steps, &o.steps}} {
		if v.val < 0 {
			fmt.Fprintf(stderr, "serve: %s: %d is negative\n", v.flag, v.val)
			return 2
		}
		if v.val > 0 {
			*v.dst = v.val
		}
	}
	if *keeps != "" {
		o.keeps = nil
		for _, s := range strings.Split(*keeps, ",") {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || f <= 0 || f > 1 {
				fmt.Fprintf(stderr, "serve: -keep: %q is not a rate in (0, 1]\n", s)
				return 2
			}
			o.keeps = append(o.keeps, f)
		}
	}
	if o.trainRatio < 0 {
		fmt.Fprintf(stderr, "serve: -train: %g is negative\n", o.trainRatio)
		return 2
	}
	for _, s := range strings.Split(*scheds, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "abort", "keep", "run", "reference", "http":
			o.schedules[s] = true
		default:
			fmt.Fprintf(stderr, "serve: -schedules: unknown schedule %q (want abort, keep, run, reference, http)\n", s)
			return 2
		}
	}
	o.bench.Concurrency = 2 * o.bench.Capacity
	o.bench.EnvConcurrency = 4 * o.bench.Capacity
	o.workdir = *workdir
	if o.workdir == "" {
		dir, err := os.MkdirTemp("", "trajflow-bench-serve-")
		if err != nil {
			fmt.Fprintln(stderr, "serve:", err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }() // best effort: the bench's scratch directory
		o.workdir = dir
	}
	var rows []Row
	var failed error
	for i, keep := range o.keeps {
		rs, err := runWorkload(ctx, o, keep, filepath.Join(o.workdir, fmt.Sprintf("w%02d", i)), stderr)
		rows = append(rows, rs...)
		if err != nil {
			failed = err
			break
		}
	}
	printTable(stdout, o, rows)
	if o.jsonPath != "" {
		data, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(o.jsonPath, data, 0o644); err != nil {
			fmt.Fprintln(stderr, "serve:", err)
			return 1
		}
	}
	if failed != nil {
		fmt.Fprintln(stderr, "serve:", failed)
		return 1
	}
	return 0
}

// workload is one keep rate's setting.
type workload struct {
	harness.Workload
	ideal      harness.Ideal // of the whole S·K kept groups' work
	idealStep  time.Duration
	genStep    time.Duration // one step's ideal generation time
	train, upd time.Duration
}

func runWorkload(ctx context.Context, o options, keep float64, dir string, log io.Writer) ([]Row, error) {
	total := o.steps * o.k
	w := workload{Workload: harness.Workload{
		Name:  fmt.Sprintf("K=%d n=%d keep=%g, %d steps", o.k, o.n, keep, o.steps),
		Tasks: int(float64(2*total)/keep) + 2*o.k, N: o.n, Preset: o.preset, Keep: keep, Target: total, MaxTokens: o.maxTokens,
	}}
	fmt.Fprintf(log, "serve: %s ...\n", w.Name)
	tasksPath := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasksPath, w.Tasks); err != nil {
		return nil, err
	}
	simOpts := o.bench.SimOptions(w.Workload)
	if slices.ContainsFunc(o.features, func(f features) bool { return f.routes }) {
		// A MoE-shaped model for every row, so that the rows differ only
		// in whether trajflow asks for and keeps the routes.
		simOpts.MoE = sim.MoE{Layers: 8, Experts: 64, TopK: 2}
	}
	srv, err := harness.StartSim(simOpts)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	cfg, err := o.bench.Config(w.Workload, tasksPath, srv.URL, filepath.Join(dir, "out"))
	if err != nil {
		return nil, err
	}
	tasks, err := harness.LoadTasks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	oracle, err := harness.Oracle(ctx, o.bench, w.Workload, cfg, tasks)
	if err != nil {
		return nil, err
	}
	work, ok := harness.Prefix(oracle, total)
	if !ok {
		return nil, fmt.Errorf("the %d tasks hold fewer than %d kept groups", w.Tasks, total)
	}
	w.ideal = harness.IdealOf(harness.AllTrajs(work), harness.CostOf(srv.Options()))
	genStep := w.ideal.T / time.Duration(o.steps)
	w.genStep = genStep
	w.train = time.Duration(float64(genStep) * o.trainRatio)
	w.upd = genStep / 50
	w.idealStep = max(genStep, w.train+w.upd)
	fmt.Fprintf(log, "serve:   ideal generation %s (%s a step), trainer %s + update %s a step\n",
		w.ideal.T.Round(time.Millisecond), genStep.Round(time.Millisecond), w.train.Round(time.Millisecond), w.upd.Round(time.Millisecond))

	var rows []Row
	for _, prio := range o.priorities {
		for _, s := range []string{"abort", "keep", "run", "http"} {
			if !o.schedules[s] {
				continue
			}
			c := *cfg
			c.Output.Dir = filepath.Join(dir, "out-"+s+"-"+prio)
			if prio == "off" {
				off := false
				c.Generate.Priority, c.Groups.CancelUndecided = "off", &off
			}
			var rs []Row
			var err error
			switch s {
			case "abort", "keep":
				var row Row
				row, err = runContinuous(ctx, o, srv, &c, w, generate.PauseMode(s))
				rs = []Row{row}
			case "run":
				var row Row
				row, err = runPerStep(ctx, o, srv, &c, w)
				rs = []Row{row}
			case "http":
				for _, ratio := range o.httpTrains {
					for _, feat := range o.features {
						var row Row
						row, err = runHTTP(ctx, o, srv, dir, tasksPath, w, ratio, prio, feat)
						rs = append(rs, row)
						fmt.Fprintf(log, "serve:   %s, priority %s: the trainer's waits (s):", row.Schedule, prio)
						for i, d := range row.Waits {
							fmt.Fprintf(log, " %.2f", d)
							if i < len(row.Queued) && row.Queued[i] >= o.k {
								fmt.Fprint(log, " (ready)")
							}
						}
						fmt.Fprintln(log)
						if err != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
			}
			for i := range rs {
				rs[i].Priority = prio
			}
			rows = append(rows, rs...)
			if err != nil {
				return rows, fmt.Errorf("%s, %s: %w", w.Name, rs[len(rs)-1].Schedule, err)
			}
		}
	}
	if o.schedules["reference"] {
		c := *cfg
		c.Output.Dir = filepath.Join(dir, "out-reference")
		row, err := runReference(ctx, o, srv, &c, w, tasks)
		rows = append(rows, row)
		if err != nil {
			return rows, fmt.Errorf("%s, %s: %w", w.Name, row.Schedule, err)
		}
	}
	return rows, nil
}

// finish fills a row's derived figures from the simulator's delta.
func finish(row *Row, o options, w workload, total time.Duration, d harness.StatsDelta) {
	row.Workload, row.Steps = w.Name, o.steps
	row.TotalS = total.Seconds()
	row.StepS = row.TotalS / float64(o.steps)
	row.IdealStepS = w.idealStep.Seconds()
	if row.StepS > 0 {
		row.Efficiency = row.IdealStepS / row.StepS
	}
	if total > 0 {
		row.BusyFrac = d.Busy.Seconds() / total.Seconds()
	}
	row.Needed, row.Generated = w.ideal.D, d.DecodedTokens
	if w.ideal.D > 0 {
		row.Ratio = float64(d.DecodedTokens) / float64(w.ideal.D)
	}
}

// trainer is the simulated trainer: it waits for each step's K groups,
// trains for w.train, then updates the policy (pause, w.upd, new version,
// resume).
func trainer(ctx context.Context, o options, w workload, pol *generate.Policy, mode generate.PauseMode, accepted func() int) error {
	for s := range o.steps {
		for accepted() < (s+1)*o.k {
			select {
			case <-ctx.Done():
				return fmt.Errorf("step %d: %d of %d groups: %w", s+1, accepted(), (s+1)*o.k, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
		if err := sleep(ctx, w.train); err != nil {
			return err
		}
		if err := pol.Pause(mode); err != nil {
			return err
		}
		err := sleep(ctx, w.upd)
		if err == nil {
			err = pol.SetVersion(int64(s + 1))
		}
		pol.Resume()
		if err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runContinuous is one run under a policy and a staleness gate
// (max_staleness 1, batch K) with the target raised to S·K, token-in-token-out,
// while the trainer consumes K groups a step.
func runContinuous(ctx context.Context, o options, srv *harness.SimHTTP, cfg *config.Config, w workload, mode generate.PauseMode) (Row, error) {
	row := Row{Schedule: fmt.Sprintf("continuous, pause %s", mode)}
	cfg.Generate.API = inference.APITokens
	cfg.Groups.Target = o.steps * o.k
	hc, err := openai.NewHTTP(cfg.Generate.Config, openai.HTTPOptions{})
	if err != nil {
		return row, err
	}
	defer hc.Close()
	pol := generate.NewPolicy(0)
	gate, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 1, StepGroups: o.k}, OnStale: groups.StaleRequeue}, pol)
	if err != nil {
		return row, err
	}
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	before := srv.Stats()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var runErr error
	var sum *runner.Summary
	wg.Add(1)
	go func() {
		defer wg.Done()
		sum, runErr = runner.Run(rctx, cfg, runner.Options{Client: hc, Continuous: &runner.Continuous{Policy: pol, Staleness: gate}})
		if runErr != nil {
			cancel()
		}
	}()
	terr := trainer(rctx, o, w, pol, mode, func() int { return gate.Stats().Accepted })
	total := time.Since(start)
	wg.Wait()
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	finish(&row, o, w, total, harness.Delta(before, srv.Stats()))
	if err := errors.Join(runErr, terr); err != nil {
		return row, err
	}
	if sum != nil {
		row.Kept = sum.Kept
	}
	st := gate.Stats()
	row.Note = fmt.Sprintf("stale groups: %d requeued", st.Requeued)
	if err := verify(ctx, cfg.Output.Dir, o.steps*o.k); err != nil {
		return row, err
	}
	row.Staleness, err = staleness(ctx, cfg.Output.Dir, o.k)
	return row, err
}

// runPerStep is one `trajflow run` per step, each resuming the output
// directory with the target raised by K, then the trainer's step.
func runPerStep(ctx context.Context, o options, srv *harness.SimHTTP, cfg *config.Config, w workload) (Row, error) {
	row := Row{Schedule: "one run per step"}
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	before := srv.Stats()
	start := time.Now()
	for s := range o.steps {
		c := *cfg
		c.Groups.Target = (s + 1) * o.k
		// Dropped groups are committed (filtered/), so that the next
		// step's run does not sample their tasks again.
		c.Output.Filtered = true
		hc, err := openai.NewHTTP(c.Generate.Config, openai.HTTPOptions{})
		if err != nil {
			return row, err
		}
		sum, err := runner.Run(ctx, &c, runner.Options{Client: hc, AllowConfigChange: true})
		hc.Close()
		if err != nil {
			return row, fmt.Errorf("step %d: %w", s+1, err)
		}
		row.Kept += sum.Kept
		if err := sleep(ctx, w.train+w.upd); err != nil {
			return row, err
		}
	}
	total := time.Since(start)
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	finish(&row, o, w, total, harness.Delta(before, srv.Stats()))
	row.Staleness[0] = o.steps * o.k // every group is generated under the trainer's current weights
	return row, verify(ctx, cfg.Output.Dir, o.steps*o.k)
}

// runReference is the batch-synchronous reference: per step, batches of K
// fresh tasks until K groups are kept (the excess discarded), then the
// trainer's step.
func runReference(ctx context.Context, o options, srv *harness.SimHTTP, cfg *config.Config, w workload, tasks []*pipeline.Task) (Row, error) {
	row := Row{Schedule: fmt.Sprintf("barrier, G=%d", o.k)}
	hc, err := openai.NewHTTP(cfg.Generate.Config, openai.HTTPOptions{})
	if err != nil {
		return row, err
	}
	defer hc.Close()
	env, err := harness.SimEnv()
	if err != nil {
		return row, err
	}
	ref := harness.NewBarrier(cfg, hc, env)
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	before := srv.Stats()
	start := time.Now()
	cursor := 0
	for s := range o.steps {
		res, err := ref.RunDynamic(ctx, tasks[cursor:], o.k, o.k)
		if err != nil {
			return row, fmt.Errorf("step %d: %w", s+1, err)
		}
		cursor += res.Tasks
		row.Kept += res.Kept
		if err := sleep(ctx, w.train+w.upd); err != nil {
			return row, err
		}
	}
	total := time.Since(start)
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	finish(&row, o, w, total, harness.Delta(before, srv.Stats()))
	row.Staleness[0] = row.Kept
	return row, nil
}

// verify checks that dir holds exactly want kept groups, none with zero
// reward std.
func verify(ctx context.Context, dir string, want int) error {
	c, err := harness.ReadCommitted(ctx, filepath.Join(dir, schema.DataDir))
	if err != nil {
		return err
	}
	if c.Groups != want || c.ZeroStd != 0 || c.NotKept != 0 {
		return fmt.Errorf("committed %d groups (%d zero std, %d rows not kept), want exactly %d kept groups with nonzero std", c.Groups, c.ZeroStd, c.NotKept, want)
	}
	return nil
}

// staleness reads the committed groups in commit order (part files, then
// rows) and counts each by the trainer's version when it consumed the
// group (its step: position / K) minus the group's oldest
// min_policy_version: 0, 1, 2 or more.
func staleness(ctx context.Context, dir string, k int) ([3]int, error) {
	var out [3]int
	paths, err := filepath.Glob(filepath.Join(dir, schema.DataDir, schema.PartGlob))
	if err != nil {
		return out, err
	}
	sort.Strings(paths)
	var order []string
	minV := map[string]int64{}
	for _, p := range paths {
		f, err := pqread.Open(p, memory.NewGoAllocator(), 4096)
		if err != nil {
			return out, err
		}
		cols, err := f.Fields(schema.ColumnName(schema.ColGroupID), schema.ColumnName(schema.ColMinPolicyVersion))
		if err == nil {
			err = f.Records(ctx, cols, func(rec arrow.Record) error {
				gid, ok1 := rec.Column(0).(*array.String)
				mv, ok2 := rec.Column(1).(*array.Int64)
				if !ok1 || !ok2 {
					return fmt.Errorf("%s: unexpected columns %s", p, rec.Schema())
				}
				for i := range int(rec.NumRows()) {
					g := gid.Value(i)
					v, seen := minV[g]
					if !seen {
						order = append(order, g)
						v = mv.Value(i)
					}
					minV[g] = min(v, mv.Value(i))
				}
				return nil
			})
		}
		_ = f.Close() // best effort: read only
		if err != nil {
			return out, err
		}
	}
	for i, g := range order {
		s := int64(i/k) - minV[g]
		out[min(max(s, 0), 2)]++
	}
	return out, nil
}

func printTable(w io.Writer, o options, rows []Row) {
	fmt.Fprintf(w, "B=%d, time scale %g, seed %d, generate.concurrency %d; the trainer's step = %g× one step's ideal generation time, its update 2%% of that\n\n",
		o.bench.Capacity, o.bench.TimeScale, o.bench.Seed, o.bench.Concurrency, o.trainRatio)
	fmt.Fprintln(w, "| workload | schedule | priority | kept | T_total s | T_step s | ideal T_step s | step eff | fleet busy | tokens needed | generated | generated ÷ needed | staleness 0 / 1 / ≥2 | note |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
	var served []Row
	for _, r := range rows {
		if strings.HasPrefix(r.Schedule, "serve over HTTP") {
			served = append(served, r)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f | %.2f | %.2f | %.3f | %.3f | %d | %d | %.3f | %d / %d / %d | %s |\n",
			r.Workload, r.Schedule, r.Priority, r.Kept, r.TotalS, r.StepS, r.IdealStepS, r.Efficiency, r.BusyFrac,
			r.Needed, r.Generated, r.Ratio, r.Staleness[0], r.Staleness[1], r.Staleness[2], r.Note)
	}
	if len(served) == 0 {
		return
	}
	fmt.Fprintf(w, "\n`trajflow serve` in a child process, the trainer over HTTP (serve.max_staleness 1, step_groups %d, pause %s):\n\n", o.k, o.pause)
	fmt.Fprintln(w, "| workload | schedule | priority | served | T_total s | T_step s | ideal T_step s | step eff | fleet busy | fleet busy after step 1 | trainer idle | generated | tokens of groups finished | generated ÷ finished | staleness 0 / 1 / ≥2 | staleness max | duplicates | note |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
	for _, r := range served {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %d | %d | %.3f | %d / %d / %d | %d | %d | %s |\n",
			r.Workload, r.Schedule, r.Priority, r.Kept, r.TotalS, r.StepS, r.IdealStepS, r.Efficiency, r.BusyFrac, r.BusyAfterFirst, r.TrainerIdle,
			r.Generated, r.Finished, r.Ratio, r.Staleness[0], r.Staleness[1], r.Staleness[2], r.StaleMax, r.Duplicates, r.Note)
	}
}
