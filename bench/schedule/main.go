// Command schedule measures how close trajflow's per-trajectory streaming
// schedule comes to the ideal makespan of a workload on a simulated
// continuous-batching server, next to the batch-synchronous reference
// schedule (a per-turn barrier, and dynamic sampling by whole-batch
// regeneration), on the same workloads, seeds and server.
//
//	go run ./bench/schedule                 # every suite (several minutes)
//	go run ./bench/schedule -suite single   # one suite: single, multi, ds
//	go run ./bench/schedule -quick          # smoke run, seconds
//	go run ./bench/schedule -suite ds -bounds   # the bounds only, from the oracle
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
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

func main() { harness.Main(run) }

// Row is one schedule on one workload.
type Row struct {
	Workload string `json:"workload"`
	Schedule string `json:"schedule"`
	Tasks    int    `json:"tasks"`
	Rollouts int    `json:"rollouts"`
	Kept     int    `json:"kept_groups"`
	// Ideal is the workload's ideal makespan and its terms.
	IdealS float64 `json:"t_ideal_s"`
	BusyS  float64 `json:"t_busy_s"`
	ChainS float64 `json:"t_chain_s"`
	// FIFOS is the makespan of a zero-overhead in-order streaming client
	// on the same model (harness.FIFO); VsFIFO = FIFOS / ActualS.
	FIFOS  float64 `json:"t_fifo_s"`
	VsFIFO float64 `json:"vs_fifo"`
	// RandS is FIFO's client's mean makespan over random orders of the
	// same groups (harness.RandomOrder): what a client that knows which
	// groups are needed but not their lengths can expect. LPTS is the
	// clairvoyant longest-first client's (harness.LongestFirst), which
	// also knows every length.
	RandS float64 `json:"t_rand_s"`
	LPTS  float64 `json:"t_lpt_s"`
	// ActualS runs from the first request to the last row committed
	// (trajflow) or the last rollout resolved (reference).
	ActualS    float64 `json:"t_actual_s"`
	Efficiency float64 `json:"efficiency"`
	// Needed are the decode tokens of the workload (for dynamic sampling,
	// of the shortest in-order prefix of tasks holding K kept groups);
	// Generated what the server decoded during the run.
	Needed    int64   `json:"tokens_needed"`
	Generated int64   `json:"tokens_generated"`
	TokenEff  float64 `json:"token_efficiency"`
	BusyFrac  float64 `json:"server_busy_fraction"`
	MeanBatch float64 `json:"mean_batch"`
	// CPULoad is the benchmark process's CPU time over T_actual (the
	// simulator and the schedule share it; 2.0 is the whole machine).
	CPULoad float64 `json:"cpu_load"`
	// RampS is when the B-th request (or the last, when fewer) was sent,
	// after the first; TailS the
	// time from the last reply to the end (env step, groups, collate and
	// the final commit).
	RampS float64 `json:"ramp_s"`
	TailS float64 `json:"tail_s"`
	Note  string  `json:"note,omitempty"`
}

type options struct {
	quick    bool
	suites   map[string]bool
	bench    harness.Bench
	jsonPath string
	workdir  string
	match    string
	noRef    bool
	// noOrderTask skips the groups.order: task runs.
	noOrderTask bool
	// bounds: print the workloads' bounds only, run no schedule.
	bounds bool
	// dsTargets are the K of the dynamic-sampling workloads.
	dsTargets []int
	// policies are the scheduling policies trajflow runs under (-policy).
	policies []string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schedule", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: tiny workloads, seconds")
	suite := fs.String("suite", "single,multi,ds", "comma-separated suites: single, multi, ds")
	scale := fs.Float64("scale", 0, "simulator time scale (default 0.05; quick 0.02)")
	capacity := fs.Int("capacity", 0, "batch size B (default 256; quick 32)")
	seed := fs.Int64("seed", 7, "simulator seed")
	conc := fs.Int("concurrency", 0, "generate.concurrency and the reference's requests in flight (default 2·B)")
	maxInflight := fs.Int("max-inflight", 0, "groups.max_inflight of the trajflow runs (0: trajflow's default)")
	batchRows := fs.Int("batch-rows", 0, "output.batch_rows of the trajflow runs (0: default)")
	fileRows := fs.Int("file-rows", 0, "output.file_rows of the trajflow runs (0: default)")
	targets := fs.String("k", "64,256", "comma-separated groups.target K of the dynamic-sampling workloads")
	policyFlag := fs.String("policy", "on", "comma-separated scheduling policies of the trajflow runs, each runs the workload: on (generate.priority: auto, groups.cancel_undecided: true, the defaults), off (neither), priority (the priority alone), cancel (cancel_undecided alone), spare=N (on, with groups.cancel_undecided_spare N)")
	noRef := fs.Bool("no-reference", false, "run trajflow only, not the reference schedules")
	noOrderTask := fs.Bool("no-order-task", false, "skip the groups.order: task run of each policy on the dynamic-sampling workloads")
	bounds := fs.Bool("bounds", false, "compute the workloads' bounds (T_ideal, T_FIFO, T_rand, T_LPT) from the oracle only, run no schedule")
	match := fs.String("match", "", "run only the workloads whose name contains this")
	jsonPath := fs.String("json", "", "also write the rows as JSON to this file")
	workdir := fs.String("workdir", "", "directory for tasks and outputs (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := options{quick: *quick, suites: map[string]bool{}, jsonPath: *jsonPath, match: *match}
	for _, s := range strings.Split(*suite, ",") {
		s = strings.TrimSpace(s)
		if s != "single" && s != "multi" && s != "ds" {
			fmt.Fprintf(stderr, "schedule: -suite: unknown suite %q (want single, multi, ds)\n", s)
			return 2
		}
		o.suites[s] = true
	}
	for _, p := range strings.Split(*policyFlag, ",") {
		p = strings.TrimSpace(p)
		if n, err := strconv.Atoi(strings.TrimPrefix(p, "spare=")); strings.HasPrefix(p, "spare=") && err == nil && n >= 0 {
			policies[p] = policy{"auto", true, &n}
		}
		if _, ok := policies[p]; !ok {
			fmt.Fprintf(stderr, "schedule: -policy: unknown policy %q (want on, off, priority, cancel, spare=N)\n", p)
			return 2
		}
		o.policies = append(o.policies, p)
	}
	for _, k := range strings.Split(*targets, ",") {
		K, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || K < 1 {
			fmt.Fprintf(stderr, "schedule: -k: %q is not a positive integer\n", k)
			return 2
		}
		o.dsTargets = append(o.dsTargets, K)
	}
	b := harness.Bench{Seed: *seed, RepeatSeed: 1000, TimeScale: 0.05, Capacity: 256}
	if *quick {
		b.TimeScale, b.Capacity = 0.02, 32
	}
	if *scale > 0 {
		b.TimeScale = *scale
	}
	if *capacity > 0 {
		b.Capacity = *capacity
	}
	b.Concurrency = 2 * b.Capacity
	if *conc > 0 {
		b.Concurrency = *conc
	}
	b.EnvConcurrency = 4 * b.Capacity
	b.MaxInflight = *maxInflight
	b.BatchRows, b.FileRows = *batchRows, *fileRows
	o.noRef, o.bounds, o.noOrderTask = *noRef, *bounds, *noOrderTask
	o.bench = b
	o.workdir = *workdir
	if o.workdir == "" {
		dir, err := os.MkdirTemp("", "trajflow-bench-schedule-")
		if err != nil {
			fmt.Fprintln(stderr, "schedule:", err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output
		o.workdir = dir
	}
	rows, err := runSuites(ctx, o, stderr)
	printTable(stdout, o, rows)
	if o.jsonPath != "" {
		data, _ := json.MarshalIndent(rows, "", "  ")
		if werr := os.WriteFile(o.jsonPath, append(data, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "schedule:", err)
		return 1
	}
	return 0
}

// policy is one -policy: generate.priority, groups.cancel_undecided and
// groups.cancel_undecided_spare (nil: the default).
type policy struct {
	priority string
	cancel   bool
	spare    *int
}

// policies are -policy's, and spare=N's once parsed.
var policies = map[string]policy{
	"on":       {"auto", true, nil},
	"off":      {"off", false, nil},
	"priority": {"auto", false, nil},
	"cancel":   {"off", true, nil},
}

// workloads are the suites' workloads.
func workloads(o options) []harness.Workload {
	B := o.bench.Capacity
	var ws []harness.Workload
	if o.quick {
		if o.suites["single"] {
			ws = append(ws, harness.Workload{Name: "single 4·B", Tasks: B, N: 4, Preset: "short", Keep: -1, BatchRollouts: B})
		}
		if o.suites["multi"] {
			ws = append(ws, harness.Workload{Name: "multi 1-4 turns, env 0.1s", Tasks: B / 2, N: 2, Preset: "agent", MinTurns: 1, MaxTurns: 4,
				EnvDelay: 100 * time.Millisecond, ObsTokens: 20, Keep: -1, MaxTokens: 64, BatchRollouts: B})
		}
		if o.suites["ds"] {
			ws = append(ws, harness.Workload{Name: "ds K=8 n=4 keep=0.5", Tasks: 64, N: 4, Preset: "short", Keep: 0.5, Target: 8, RefGroups: []int{8, 24}})
		}
		return ws
	}
	if o.suites["single"] {
		// One batch of at most B requests, then four consecutive batches at
		// 1·B, 4·B and 16·B load: the reference schedule waits for each
		// batch to finish before it sends the next (the barrier between
		// training steps); trajflow streams the same requests.
		for _, k := range []struct {
			name           string
			batch, batches int
		}{{"single 1×B/2", B / 2, 1}, {"single 4×1·B", B, 4}, {"single 4×4·B", 4 * B, 4}, {"single 4×16·B", 16 * B, 4}} {
			ws = append(ws, harness.Workload{Name: k.name, Tasks: k.batch * k.batches / 4, N: 4, Preset: "reasoning", Keep: -1,
				MaxTokens: 8192, BatchRollouts: k.batch})
		}
	}
	if o.suites["multi"] {
		for _, d := range []time.Duration{100 * time.Millisecond, time.Second} {
			ws = append(ws, harness.Workload{Name: fmt.Sprintf("multi 1-10 turns, env %gs", d.Seconds()), Tasks: B / 2, N: 4,
				Preset: "agent", MinTurns: 1, MaxTurns: 10, EnvDelay: d, Keep: -1, BatchRollouts: B})
		}
	}
	if o.suites["ds"] {
		for _, K := range o.dsTargets {
			for _, keep := range []float64{0.3, 0.5, 0.7} {
				tasks := int(float64(3*K)/keep) + 3*K
				ws = append(ws, harness.Workload{Name: fmt.Sprintf("ds K=%d n=8 keep=%g", K, keep), Tasks: tasks, N: 8, Preset: "reasoning",
					Keep: keep, Target: K, MaxTokens: 8192, RefGroups: []int{K, 3 * K}})
			}
		}
	}
	return ws
}

func runSuites(ctx context.Context, o options, log io.Writer) ([]Row, error) {
	var rows []Row
	for i, w := range workloads(o) {
		if !strings.Contains(w.Name, o.match) {
			continue
		}
		fmt.Fprintf(log, "schedule: %s ...\n", w.Name)
		rs, err := runWorkload(ctx, o, w, filepath.Join(o.workdir, fmt.Sprintf("w%02d", i)), log)
		rows = append(rows, rs...)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", w.Name, err)
		}
	}
	return rows, nil
}

func runWorkload(ctx context.Context, o options, w harness.Workload, dir string, log io.Writer) ([]Row, error) {
	b := o.bench
	tasksPath := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasksPath, w.Tasks); err != nil {
		return nil, err
	}
	srv, err := harness.StartSim(b.SimOptions(w))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	cost := harness.CostOf(srv.Options())

	cfg, err := b.Config(w, tasksPath, srv.URL, filepath.Join(dir, "trajflow"))
	if err != nil {
		return nil, err
	}
	tasks, err := harness.LoadTasks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	oracle, err := harness.Oracle(ctx, b, w, cfg, tasks)
	if err != nil {
		return nil, err
	}
	work := oracle
	if w.Target > 0 {
		var ok bool
		if work, ok = harness.Prefix(oracle, w.Target); !ok {
			return nil, fmt.Errorf("the %d tasks hold fewer than %d kept groups", w.Tasks, w.Target)
		}
	}
	ideal := harness.IdealOf(harness.AllTrajs(work), cost)
	fifo := harness.FIFO(harness.AllTrajs(work), cost, b.Concurrency)
	fmt.Fprintf(log, "schedule:   workload: %d trajectories, D=%d P=%d Lmax=%d, T_busy=%s T_chain=%s\n",
		ideal.Trajs, ideal.D, ideal.P, ideal.LMax, ideal.Busy.Round(time.Millisecond), ideal.Chain.Round(time.Millisecond))
	rnd := harness.RandomOrder(work, cost, b.Concurrency, randRounds, uint64(b.Seed))
	lpt := harness.LongestFirst(harness.AllTrajs(work), cost, b.Concurrency)
	fmt.Fprintf(log, "schedule:   zero-overhead FIFO client: %s, random group order (mean of %d): %s, longest first: %s\n",
		fifo.Round(time.Millisecond), randRounds, rnd.Round(time.Millisecond), lpt.Round(time.Millisecond))
	setFIFO := func(rs []Row) []Row {
		for i := range rs {
			rs[i].FIFOS, rs[i].RandS, rs[i].LPTS = fifo.Seconds(), rnd.Seconds(), lpt.Seconds()
			if rs[i].ActualS > 0 {
				rs[i].VsFIFO = fifo.Seconds() / rs[i].ActualS
			}
		}
		return rs
	}

	if o.bounds {
		return setFIFO(boundRows(w, ideal, oracle, work, cost, b.Concurrency)), nil
	}
	rows, err := runSchedules(ctx, o, srv, cfg, w, ideal, oracle, tasks)
	return setFIFO(rows), err
}

// boundRows are -bounds' rows of one workload: the bounds alone, and
// for a target the zero-overhead oblivious dynamic-sampling client
// (harness.FirstKept) on the first M groups of the input, M from the
// prefix's length up: without cancel_undecided, with it, and with it and
// groups.cancel_undecided_spare 2, 4 and 8; then the length-blind
// policies of hedgeBounds (harness.HedgeModel).
func boundRows(w harness.Workload, ideal harness.Ideal, oracle, work []harness.OracleGroup, cost harness.Cost, conc int) []Row {
	rows := []Row{{Workload: w.Name, Schedule: "bounds", Tasks: len(work), Rollouts: ideal.Trajs,
		IdealS: ideal.T.Seconds(), BusyS: ideal.Busy.Seconds(), ChainS: ideal.Chain.Seconds(), Needed: ideal.D}}
	if w.Target == 0 {
		return rows
	}
	for _, f := range []float64{1, 1.05, 1.1, 1.2, 1.3} {
		m := prefixGroups(f, work, oracle)
		for _, cancel := range []harness.Cancel{{}, {On: true}, {On: true, Spare: 2}, {On: true, Spare: 4}, {On: true, Spare: 8}} {
			st := harness.FirstKept(oracle[:m], w.Target, cost, conc, cancel)
			name := fmt.Sprintf("model: first %d groups (%.2f× prefix)", m, f)
			switch {
			case cancel.Spare > 0:
				name += fmt.Sprintf(", cancel undecided, spare %d", cancel.Spare)
			case cancel.On:
				name += ", cancel undecided"
			}
			rows = append(rows, modelRow(w, ideal, name, m, st, ""))
		}
	}
	return append(rows, hedgeRows(w, ideal, oracle, work, cost, conc)...)
}

// prefixGroups is f times the prefix's groups, at most the input's.
func prefixGroups(f float64, work, oracle []harness.OracleGroup) int {
	return min(int(math.Ceil(f*float64(len(work)))), len(oracle))
}

// modelRow is the row of a model's outcome st on tasks groups.
func modelRow(w harness.Workload, ideal harness.Ideal, name string, tasks int, st harness.Stopped, note string) Row {
	r := Row{Workload: w.Name, Schedule: name, Tasks: tasks, Kept: st.Kept, IdealS: ideal.T.Seconds(), ActualS: st.T.Seconds(),
		Needed: ideal.D, Generated: st.Decoded, Note: note}
	if st.T > 0 {
		r.Efficiency = ideal.T.Seconds() / st.T.Seconds()
	}
	if st.Decoded > 0 {
		r.TokenEff = float64(ideal.D) / float64(st.Decoded)
	}
	return r
}

// hedgeBound is one -bounds row of harness.HedgeModel: the policy, the
// groups started at t = 0 as a multiple of the prefix (0: none, the
// policy's own top-up starts them, as a live client must), and whether
// the policy's keep-rate prior is the workload's keep rate (what a
// client measured on earlier steps) instead of ½.
type hedgeBound struct {
	prefix float64
	h      harness.Hedge
	prior  bool
}

// hedgeBounds are the best rows of each length-blind policy family at
// K=64 keep 0.7 (BENCHMARKS.md, "What a length-blind client can
// reach"), each with the same parameters at every keep rate and K:
// ordering with preemption (recomputed, as the simulator does),
// sibling-informed ordering, age hedging with the policy's own top-up
// (with and without an input budget), cancelling the surplus decided
// groups, and, as a counterfactual the simulator does not offer,
// preemption without recomputation; then the online rows again with the
// workload's keep rate as the policy's prior.
var hedgeBounds = []hedgeBound{
	{1, harness.Hedge{Rank: harness.RankLeast, Quantum: 2000, Preempt: true}, false},
	{1.05, harness.Hedge{Probe: 250, Rank: harness.RankMost, Preempt: true}, false},
	{1.05, harness.Hedge{Members: 3, Rank: harness.RankSibling, Cancel: spare2}, false},
	{0, harness.Hedge{Members: 2, Rank: harness.RankSibling, Cancel: spare2, Age: 1000, Replace: true}, false},
	{0, harness.Hedge{Members: 2, Rank: harness.RankSibling, Cancel: spare2, Age: 1000, Replace: true, Over: 1.2}, false},
	{0, harness.Hedge{Members: 1, Rank: harness.RankSibling, Cancel: spare2, Age: 750, Replace: true}, false},
	{0, harness.Hedge{Surplus: true, Replace: true, Cancel: spare2}, false},
	{1, harness.Hedge{Rank: harness.RankLeast, Quantum: 250, Preempt: true, Swap: true}, false},
	{1.05, harness.Hedge{Rank: harness.RankLeast, Quantum: 250, Preempt: true, Swap: true, Cancel: spare2}, false},
	{0, harness.Hedge{Members: 3, Rank: harness.RankSibling, Cancel: spare2, Replace: true}, true},
	{0, harness.Hedge{Cancel: spare2, Age: 1000, Replace: true, Over: 1.3}, true},
	{0, harness.Hedge{Members: 2, Rank: harness.RankSibling, Cancel: spare2, Age: 1000, Replace: true}, true},
}

// spare2 is cancel_undecided with two spares, the default at K=64.
var spare2 = harness.Cancel{On: true, Spare: 2}

// hedgeRows are -bounds' rows of hedgeBounds on one workload: the groups
// started, and what the policy cancelled and preempted.
func hedgeRows(w harness.Workload, ideal harness.Ideal, oracle, work []harness.OracleGroup, cost harness.Cost, conc int) []Row {
	var rows []Row
	for _, hb := range hedgeBounds {
		if hb.prior {
			hb.h.Prior = w.Keep
		}
		m := 0
		name := "model: hedge, online start"
		if hb.prefix > 0 {
			m = prefixGroups(hb.prefix, work, oracle)
			name = fmt.Sprintf("model: hedge, first %d groups (%.2f× prefix)", m, hb.prefix)
		}
		res, err := harness.HedgeModel(oracle, m, w.Target, cost, conc, hb.h)
		if err != nil {
			rows = append(rows, Row{Workload: w.Name, Schedule: name + ", " + hb.h.String(), Note: err.Error()})
			continue
		}
		note := fmt.Sprintf("%d steps, %d groups cancelled, %d preemptions", res.Steps, res.Cancelled, res.Preempted)
		rows = append(rows, modelRow(w, ideal, name+", "+hb.h.String(), res.Started, res.Stopped, note))
	}
	return rows
}

// randRounds is the number of random orders RandomOrder averages.
const randRounds = 20

func runSchedules(ctx context.Context, o options, srv *harness.SimHTTP, cfg *config.Config, w harness.Workload, ideal harness.Ideal, oracle []harness.OracleGroup, tasks []*pipeline.Task) ([]Row, error) {
	var rows []Row
	for _, name := range o.policies {
		pc := *cfg
		pol := policies[name]
		pc.Generate.Priority = pol.priority
		pc.Groups.CancelUndecided = &pol.cancel
		if pol.spare != nil {
			pc.Groups.CancelUndecidedSpare = pol.spare
		}
		pc.Output.Dir = cfg.Output.Dir + "-policy-" + strings.ReplaceAll(name, "=", "")
		row, err := runTrajflow(ctx, srv, &pc, w, ideal, oracle)
		rows = append(rows, row)
		if err != nil {
			return rows, err
		}
		if w.Target > 0 && !o.noOrderTask {
			// The same run with groups.order: task: the cost of committing
			// the first K passing groups in task order.
			tc := pc
			tc.Groups.Order = "task"
			tc.Output.Dir = pc.Output.Dir + "-order-task"
			row, err := runTrajflow(ctx, srv, &tc, w, ideal, oracle)
			rows = append(rows, row)
			if err != nil {
				return rows, err
			}
		}
	}
	if o.noRef {
		return rows, nil
	}
	if w.Target > 0 {
		for _, g := range w.RefGroups {
			row, err := runReference(ctx, srv, cfg, w, ideal, tasks, g)
			rows = append(rows, row)
			if err != nil {
				return rows, err
			}
		}
		return rows, nil
	}
	row, err := runReference(ctx, srv, cfg, w, ideal, tasks, 0)
	rows = append(rows, row)
	return rows, err
}

// measure runs f against srv and fills the row's timing and server figures.
func measure(ctx context.Context, srv *harness.SimHTTP, rec *harness.Recorder, row *Row, ideal harness.Ideal, f func() error) error {
	if err := srv.WaitIdle(ctx); err != nil {
		return err
	}
	before, cpu0 := srv.Stats(), harness.CPUTime()
	err := f()
	end := time.Now()
	cpu := harness.CPUTime() - cpu0
	if werr := srv.WaitIdle(ctx); err == nil {
		err = werr
	}
	d := harness.Delta(before, srv.Stats())
	actual := end.Sub(rec.First())
	row.IdealS, row.BusyS, row.ChainS = ideal.T.Seconds(), ideal.Busy.Seconds(), ideal.Chain.Seconds()
	row.ActualS = actual.Seconds()
	if actual > 0 {
		row.Efficiency = ideal.T.Seconds() / actual.Seconds()
		row.BusyFrac = d.Busy.Seconds() / actual.Seconds()
		row.CPULoad = cpu.Seconds() / actual.Seconds()
	}
	row.Needed, row.Generated = ideal.D, d.DecodedTokens
	if d.DecodedTokens > 0 {
		row.TokenEff = float64(ideal.D) / float64(d.DecodedTokens)
	}
	row.MeanBatch = d.MeanBatch()
	row.RampS = rec.CallAt(min(srv.Options().Capacity, rec.Calls()) - 1).Seconds()
	row.TailS = end.Sub(rec.Last()).Seconds()
	if d.Preempted > 0 {
		row.Note = strings.TrimPrefix(row.Note+fmt.Sprintf("; %d preempted, %d tokens recomputed", d.Preempted, d.RecomputedTokens), "; ")
	}
	if n := rec.Failures(); n > 0 {
		row.Note = strings.TrimPrefix(row.Note+fmt.Sprintf("; %d failed requests", n), "; ")
	}
	return err
}

func runTrajflow(ctx context.Context, srv *harness.SimHTTP, cfg *config.Config, w harness.Workload, ideal harness.Ideal, oracle []harness.OracleGroup) (Row, error) {
	row := Row{Workload: w.Name, Schedule: "trajflow"}
	if cfg.Groups.Order == "task" {
		row.Schedule = "trajflow, order: task"
	}
	switch cancel := cfg.Groups.CancelUndecided == nil || *cfg.Groups.CancelUndecided; {
	case cfg.Generate.Priority == "off" && !cancel:
		row.Schedule += ", policy off"
	case cfg.Generate.Priority == "off":
		row.Schedule += ", cancel_undecided only"
	case !cancel:
		row.Schedule += ", priority only"
	}
	if v := cfg.Groups.CancelUndecidedSpare; v != nil {
		row.Schedule += fmt.Sprintf(", spare %d", *v)
	}
	hc, err := openai.NewHTTP(cfg.Generate.Config, openai.HTTPOptions{})
	if err != nil {
		return row, err
	}
	defer hc.Close()
	rec := harness.NewRecorder(hc)
	var sum *runner.Summary
	err = measure(ctx, srv, rec, &row, ideal, func() error {
		var err error
		sum, err = runner.Run(ctx, cfg, runner.Options{Client: rec})
		return err
	})
	if sum != nil {
		row.Tasks, row.Rollouts, row.Kept = int(sum.Tasks), int(sum.Dispatched), sum.Kept
	}
	if err != nil {
		return row, err
	}
	c, err := harness.ReadCommitted(ctx, filepath.Join(cfg.Output.Dir, schema.DataDir))
	if err != nil {
		return row, err
	}
	var notes []string
	if w.Target > 0 {
		// Every committed group must be kept with a nonzero std, and
		// exactly K of them.
		notes = append(notes, fmt.Sprintf("committed %d groups, %d with zero std, %d rows not kept", c.Groups, c.ZeroStd, c.NotKept))
		if c.Groups != w.Target || c.ZeroStd != 0 || c.NotKept != 0 {
			err = fmt.Errorf("committed %d groups (%d zero std, %d rows not kept), want exactly %d kept groups with nonzero std", c.Groups, c.ZeroStd, c.NotKept, w.Target)
		}
		if cfg.Groups.Order == "task" {
			// Exactly the first K passing groups in task order.
			prefix, _ := harness.Prefix(oracle, w.Target)
			var want []int64
			for _, g := range prefix {
				if g.Kept {
					want = append(want, g.Task)
				}
			}
			if fmt.Sprint(c.Tasks) != fmt.Sprint(want) {
				err = errors.Join(err, fmt.Errorf("order: task committed the groups of tasks %v, want the first %d passing in task order %v", c.Tasks, w.Target, want))
			} else {
				notes = append(notes, "the first K passing in task order")
			}
		}
	} else {
		// Every trajectory ran exactly as the oracle says.
		if c.Rows != ideal.Trajs {
			err = fmt.Errorf("committed %d rows, want %d", c.Rows, ideal.Trajs)
		}
		if got := harness.IdealOf(rec.Trajs(), harness.Cost{B: 1}); got.D != ideal.D || got.P != ideal.P {
			err = errors.Join(err, fmt.Errorf("the run decoded D=%d P=%d, the oracle D=%d P=%d", got.D, got.P, ideal.D, ideal.P))
		}
	}
	row.Note = strings.Join(append(notes, row.Note), "; ")
	row.Note = strings.TrimSuffix(row.Note, "; ")
	return row, err
}

func runReference(ctx context.Context, srv *harness.SimHTTP, cfg *config.Config, w harness.Workload, ideal harness.Ideal, tasks []*pipeline.Task, groups int) (Row, error) {
	row := Row{Workload: w.Name}
	hc, err := openai.NewHTTP(cfg.Generate.Config, openai.HTTPOptions{})
	if err != nil {
		return row, err
	}
	defer hc.Close()
	rec := harness.NewRecorder(hc)
	env, err := harness.SimEnv()
	if err != nil {
		return row, err
	}
	ref := harness.NewBarrier(cfg, rec, env)
	var res harness.BatchResult
	if groups > 0 {
		row.Schedule = fmt.Sprintf("barrier, G=%d", groups)
	} else {
		row.Schedule = fmt.Sprintf("barrier, %d/batch", w.BatchRollouts)
	}
	err = measure(ctx, srv, rec, &row, ideal, func() error {
		var err error
		if groups > 0 {
			res, err = ref.RunDynamic(ctx, tasks, groups, w.Target)
		} else {
			res, err = ref.RunFixed(ctx, tasks, max(w.BatchRollouts/w.N, 1))
		}
		return err
	})
	row.Tasks, row.Rollouts, row.Kept = res.Tasks, res.Rollouts, res.Kept
	row.Note = strings.TrimPrefix(fmt.Sprintf("%d batches; %s", res.Batches, row.Note), "; ")
	row.Note = strings.TrimSuffix(row.Note, "; ")
	return row, err
}

func printTable(w io.Writer, o options, rows []Row) {
	b := o.bench
	fmt.Fprintf(w, "B=%d, time scale %g, generate.concurrency %d, env.concurrency %d, groups.max_inflight %d, sim seed %d\n\n",
		b.Capacity, b.TimeScale, b.Concurrency, b.EnvConcurrency, b.MaxInflight, b.Seed)
	fmt.Fprintln(w, "| workload | schedule | tasks | rollouts | kept | T_ideal s | T_FIFO s | T_rand s | T_LPT s | T_actual s | efficiency | T_FIFO/T_actual | tokens needed | generated | token eff | busy | mean batch | cpu | ramp s | tail s | note |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %d | %d | %.3f | %.3f | %.1f | %.2f | %.3f | %.3f | %s |\n",
			r.Workload, r.Schedule, r.Tasks, r.Rollouts, r.Kept, r.IdealS, r.FIFOS, r.RandS, r.LPTS, r.ActualS, r.Efficiency, r.VsFIFO,
			r.Needed, r.Generated, r.TokenEff, r.BusyFrac, r.MeanBatch, r.CPULoad, r.RampS, r.TailS, r.Note)
	}
}
