package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/groups"
)

// serveYAML is the serve child's config: the workload's tasks and
// simulator, the sim environment, dynamic sampling (nonzero_std),
// serve.max_staleness 1 with steps of K, token-in-token-out (so that a
// pause in abort mode continues each request from its tokens) or chat
// without token ids (-api chat).
const serveYAML = `run: {id: bench-serve, progress: 1h}
source: {path: %q, limit: %d}
prompt: {user: "{question}"}
repeat: {n: %d, seed: %d}
generate:
  endpoints: [%q]
  model: sim
  api: %s
  concurrency: %d
  priority: %s
  params: {%s}%s
env: {name: sim, max_turns: 1000, concurrency: %d}
groups: {keep: nonzero_std, cancel_undecided: %t}
output: {dir: %q}
serve: {max_staleness: 1, step_groups: %d, pause_mode: %s%s}
`

// httpRuns numbers the HTTP rows of this process (their directories).
var httpRuns int

// serveChild is `trajflow serve` running as a child process.
type serveChild struct {
	url  string
	cmd  *exec.Cmd
	done chan error
	log  *strings.Builder
}

// startServe starts `trajflow serve CONFIG --addr 127.0.0.1:0` and waits
// for its listening line.
func startServe(ctx context.Context, cfgPath string) (*serveChild, error) {
	cmd, err := harness.Child(ctx, "serve", cfgPath, "--addr", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &serveChild{cmd: cmd, done: make(chan error, 1), log: &strings.Builder{}}
	lines := bufio.NewScanner(errPipe)
	url := make(chan string, 1)
	go func() {
		for lines.Scan() {
			line := lines.Text()
			if _, rest, ok := strings.Cut(line, "serving on "); ok && len(url) == 0 {
				url <- strings.Fields(rest)[0]
			}
			if c.log.Len() < 1<<16 {
				c.log.WriteString(line + "\n")
			}
		}
		c.done <- cmd.Wait()
	}()
	select {
	case u := <-url:
		c.url = u
		return c, nil
	case err := <-c.done:
		return nil, fmt.Errorf("trajflow serve exited before listening: %v\n%s", err, c.log.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("trajflow serve did not listen within 60 s (then %v)", <-c.done)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%w (trajflow serve then %v)", ctx.Err(), <-c.done)
	}
}

// stop stops the service (SIGTERM: it commits the finished groups) and
// waits for it.
func (c *serveChild) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		// A stop by a signal exits 130, the finished groups committed.
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 130) {
			return fmt.Errorf("trajflow serve: %w\n%s", err, c.log.String())
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		return fmt.Errorf("trajflow serve did not stop within 60 s of SIGTERM (then %v)", <-c.done)
	}
}

// trainerRun is what the HTTP trainer saw.
type trainerRun struct {
	start, first, last, end time.Time
	waited                  time.Duration   // in Next, after the first step
	waits                   []time.Duration // in each Next
	queued                  []int           // the queued groups then
	busyAtFirst, busyAtLast time.Duration   // the simulator's busy time then
	busyAtEnd               time.Duration
	staleness               [3]int
	staleMax                int64
	groups, duplicates      int
	servedTokens            int64
	acks                    time.Duration // in Ack, in all
	pauses                  time.Duration // in Pause, in all (a pause waits for an evaluation running)
}

// runHTTP is `trajflow serve` in a child process over the workload's
// simulator, fed by a trainer over HTTP (the Go client): S times, take a
// step of K groups, train for train, acknowledge it, then update the
// policy (pause, w.upd, POST /v1/policy, resume). It then lets the
// service finish what the staleness bound admitted, stops it, and reads
// the groups it finished (data/ and filtered/) back.
func runHTTP(ctx context.Context, o options, srv *harness.SimHTTP, dir, tasksPath string, w workload, ratio float64, prio string, feat features) (Row, error) {
	if feat.drift {
		o.drift = true
	}
	bound := "generation-bound"
	if ratio >= 1 {
		bound = "training-bound"
	}
	row := Row{Schedule: fmt.Sprintf("serve over HTTP, %s (train %g×)", bound, ratio), Priority: prio}
	if o.jump != 1 || o.api != "tokens" {
		row.Schedule += fmt.Sprintf(", versions +%d, api %s", o.jump, o.api)
	}
	switch {
	case feat == features{true, true, true}:
		row.Schedule += ", features on (" + feat.String() + ")"
	case feat.any():
		row.Schedule += ", features " + feat.String()
	case o.drift:
		row.Schedule += ", acks with logprobs"
	}
	train := time.Duration(float64(w.genStep) * ratio)
	ideal := max(w.genStep, train+w.upd)
	// A directory of its own for each row, a repeated setting's included
	// (-features off,on,off,on): a second service must not resume the
	// first one's output.
	httpRuns++
	out := filepath.Join(dir, fmt.Sprintf("out-http-%s-%g-%d", prio, ratio, httpRuns))
	var params []string
	if o.api == "tokens" {
		params = append(params, "return_token_ids: true")
	}
	if o.maxTokens > 0 {
		params = append(params, fmt.Sprintf("max_tokens: %d", o.maxTokens))
	}
	commit := ""
	if o.commit > 0 {
		commit = fmt.Sprintf(", commit_interval: %s", o.commit)
	}
	generateExtra := ""
	if feat.routes {
		// The routes of every token (the simulator's MoE model).
		generateExtra = "\n  routed_experts: true"
	}
	if feat.eval {
		// An evaluation set of 16 of the tasks, 2 samples each, at
		// versions 2, 4, …
		evalPath := filepath.Join(dir, "eval-tasks.jsonl")
		if err := harness.WriteTasks(evalPath, 16); err != nil {
			return row, err
		}
		commit += fmt.Sprintf(", eval: {source: {path: %q}, n: 2, every: 2}", evalPath)
	}
	priority := "auto"
	if prio == "off" {
		priority = "off"
	}
	text := fmt.Sprintf(serveYAML, tasksPath, w.Tasks, o.n, o.bench.RepeatSeed, srv.URL, o.api, o.bench.Concurrency, priority, strings.Join(params, ", "), generateExtra,
		o.bench.EnvConcurrency, prio == "on", out, o.k, o.pause, commit)
	cfgPath := filepath.Join(dir, fmt.Sprintf("serve-%s-%g-%d.yaml", prio, ratio, httpRuns))
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		return row, err
	}
	if err := srv.WaitIdle(ctx); err != nil {
		return row, err
	}
	before := srv.Stats()
	selfCPU := harness.CPUTime()
	child, err := startServe(ctx, cfgPath)
	if err != nil {
		return row, err
	}
	tr, terr := httpTrainer(ctx, o, srv, child.url, train, w.upd)
	// What the staleness bound admitted is finished and committed before
	// the service stops: its tokens are the next steps', not waste.
	if terr == nil {
		terr = settle(ctx, srv, child.url)
	}
	// The groups the service found too stale to serve (max_staleness
	// at hand-out): in data/, never served.
	staleServe := 0
	if terr == nil {
		var st *client.Status
		if st, terr = client.New(child.url, "").Status(ctx); terr == nil {
			staleServe = st.StaleGroups
		}
	}
	serr := child.stop()
	if err := errors.Join(terr, serr); err != nil {
		return row, err
	}
	selfCPU = harness.CPUTime() - selfCPU
	ps := child.cmd.ProcessState
	serveCPU := ps.UserTime() + ps.SystemTime()
	d := harness.Delta(before, srv.Stats())
	fin, err := readFinished(ctx, out)
	if err != nil {
		return row, err
	}
	total := tr.end.Sub(tr.start)
	row.Workload, row.Steps, row.Kept = w.Name, o.steps, tr.groups
	row.TotalS = total.Seconds()
	row.StepS = row.TotalS / float64(o.steps)
	row.IdealStepS = ideal.Seconds()
	if row.StepS > 0 {
		row.Efficiency = row.IdealStepS / row.StepS
	}
	if total > 0 {
		row.BusyFrac = (tr.busyAtEnd - before.Busy).Seconds() / total.Seconds()
	}
	if span := tr.last.Sub(tr.first); span > 0 {
		row.BusyAfterFirst = (tr.busyAtLast - tr.busyAtFirst).Seconds() / span.Seconds()
	}
	if span := tr.end.Sub(tr.first); span > 0 {
		row.TrainerIdle = tr.waited.Seconds() / span.Seconds()
	}
	row.Generated, row.Finished, row.Served = d.DecodedTokens, fin.tokens, tr.servedTokens
	if fin.tokens > 0 {
		row.Ratio = float64(d.DecodedTokens) / float64(fin.tokens)
	}
	row.Staleness, row.StaleMax, row.Duplicates = tr.staleness, tr.staleMax, tr.duplicates
	for _, d := range tr.waits {
		row.Waits = append(row.Waits, d.Seconds())
	}
	row.Queued = tr.queued
	row.Note = fmt.Sprintf("%d groups finished: %d kept (%d served), %d dropped by the keep rule; %d thrown away as stale (%d tokens; %d found too stale to serve when a step was made); acks %.0f ms a step, pauses %.0f ms a step",
		fin.kept+fin.staleGroups+fin.dropped, fin.kept, tr.groups, fin.dropped, fin.staleGroups, fin.stale, staleServe, 1000*tr.acks.Seconds()/float64(o.steps), 1000*tr.pauses.Seconds()/float64(o.steps))
	if o.drift {
		row.Note += ", each with the trainer's logprobs (drift measured: 0)"
	}
	// Where the machine's CPU went: the service, and this process (the
	// simulated fleet and the trainer).
	row.Note += fmt.Sprintf("; CPU s: serve %.1f, simulator and trainer %.1f", serveCPU.Seconds(), selfCPU.Seconds())
	if tr.duplicates > 0 {
		return row, fmt.Errorf("%d groups were served twice", tr.duplicates)
	}
	if tr.groups != o.steps*o.k {
		return row, fmt.Errorf("served %d groups in %d steps, want %d", tr.groups, o.steps, o.steps*o.k)
	}
	// The features did their work: evaluations were written, and the
	// kept rows hold their tokens' routes.
	if feat.eval {
		evals, _ := filepath.Glob(filepath.Join(out, schema.EvalDir, "v-*"))
		if len(evals) == 0 {
			return row, fmt.Errorf("features on: no evaluation under %s", filepath.Join(out, schema.EvalDir))
		}
		row.Note += fmt.Sprintf("; %d evaluations written", len(evals))
	}
	if feat.routes {
		if fin.routed == 0 {
			return row, fmt.Errorf("features on: no kept row holds routed experts")
		}
		row.Note += fmt.Sprintf("; %d kept rows with routed experts", fin.routed)
	}
	return row, nil
}

// httpTrainer is the trainer's loop over HTTP.
func httpTrainer(ctx context.Context, o options, srv *harness.SimHTTP, url string, train, upd time.Duration) (trainerRun, error) {
	var tr trainerRun
	c := client.New(url, "")
	c.Name = "bench-trainer"
	seen := map[[2]int64]bool{}
	version := int64(0)
	tr.start = time.Now()
	for s := range o.steps {
		st, err := c.Status(ctx)
		if err != nil {
			return tr, err
		}
		tr.queued = append(tr.queued, st.QueuedGroups)
		asked := time.Now()
		step, err := c.Next(ctx, o.k, client.FormatArrow)
		if err != nil {
			return tr, fmt.Errorf("step %d: %w", s+1, err)
		}
		got := time.Now()
		tr.waits = append(tr.waits, got.Sub(asked))
		busy := srv.Stats().Busy
		if s == 0 {
			tr.first, tr.busyAtFirst = got, busy
		} else {
			tr.waited += got.Sub(asked)
		}
		tr.last, tr.busyAtLast = got, busy
		tr.groups += step.Groups
		err = readStep(step, version, seen, &tr)
		var lps [][]float32
		if o.drift && err == nil {
			lps, err = engineLogprobs(step)
		}
		step.Release()
		if err != nil {
			return tr, fmt.Errorf("step %d: %w", step.Number, err)
		}
		if err := sleep(ctx, train); err != nil {
			return tr, err
		}
		acking := time.Now()
		if o.drift {
			// The trainer's logprobs are the engine's own: drift 0.
			d, err := c.AckLogprobs(ctx, step.Number, 0, 0, lps)
			if err != nil {
				return tr, fmt.Errorf("ack of step %d: %w", step.Number, err)
			}
			if d == nil || d.All.MeanAbs != 0 {
				return tr, fmt.Errorf("ack of step %d: drift %+v, want 0 for the engine's own logprobs", step.Number, d)
			}
		} else if err := c.Ack(ctx, step.Number); err != nil {
			return tr, fmt.Errorf("ack of step %d: %w", step.Number, err)
		}
		tr.acks += time.Since(acking)
		pausing := time.Now()
		if err := c.Pause(ctx, ""); err != nil {
			return tr, err
		}
		tr.pauses += time.Since(pausing)
		err = sleep(ctx, upd)
		version += int64(o.jump)
		if err == nil {
			err = c.SetPolicy(ctx, version)
		}
		if rerr := c.Resume(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return tr, err
		}
	}
	tr.end, tr.busyAtEnd = time.Now(), srv.Stats().Busy
	return tr, nil
}

// engineLogprobs is a step's logprobs of its generated tokens (loss_mask
// 1), per row in order: what a trainer whose weights are the engine's
// sends with its ack.
func engineLogprobs(step *client.Step) ([][]float32, error) {
	var out [][]float32
	for _, rec := range step.Records {
		sc := rec.Schema()
		mi, li := sc.FieldIndices(schema.ColumnName(schema.ColLossMask)), sc.FieldIndices(schema.ColumnName(schema.ColResponseLogprobs))
		if len(mi) != 1 || len(li) != 1 {
			return nil, fmt.Errorf("no loss_mask or response_logprobs column")
		}
		mask, ok1 := rec.Column(mi[0]).(*array.List)
		lps, ok2 := rec.Column(li[0]).(*array.List)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unexpected loss_mask or response_logprobs type")
		}
		mv, ok3 := mask.ListValues().(*array.Int8)
		lv, ok4 := lps.ListValues().(*array.Float32)
		if !ok3 || !ok4 {
			return nil, fmt.Errorf("unexpected loss_mask or response_logprobs values")
		}
		for i := range int(rec.NumRows()) {
			row := []float32{}
			if !mask.IsNull(i) && !lps.IsNull(i) {
				from, to := mask.ValueOffsets(i)
				lfrom, _ := lps.ValueOffsets(i)
				for j := from; j < to; j++ {
					if mv.Value(int(j)) == 1 {
						row = append(row, lv.Value(int(lfrom+j-from)))
					}
				}
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// readStep counts a step's groups (task_index, attempt) against those
// served before, their staleness (the trainer's version less the group's
// oldest min_policy_version), and the step's decode tokens.
func readStep(step *client.Step, version int64, seen map[[2]int64]bool, tr *trainerRun) error {
	inStep := map[[2]int64]int64{} // a group's oldest version
	for _, rec := range step.Records {
		sc := rec.Schema()
		col := func(name string) arrow.Array {
			if idx := sc.FieldIndices(name); len(idx) > 0 {
				return rec.Column(idx[0])
			}
			return nil
		}
		task, ok1 := col(schema.ColumnName(schema.ColTaskIndex)).(*array.Int64)
		attempt, ok2 := col(schema.ColumnName(schema.ColAttempt)).(*array.Int32)
		toks, ok3 := col(schema.ColumnName(schema.ColCompletionTokens)).(*array.Int64)
		minV, ok4 := col(schema.ColumnName(schema.ColMinPolicyVersion)).(*array.Int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("unexpected columns %s", sc)
		}
		for i := range int(rec.NumRows()) {
			tr.servedTokens += toks.Value(i)
			k := [2]int64{task.Value(i), int64(attempt.Value(i))}
			if v, ok := inStep[k]; ok {
				inStep[k] = min(v, minV.Value(i))
				continue
			}
			inStep[k] = minV.Value(i)
			if seen[k] {
				tr.duplicates++
			}
			seen[k] = true
		}
	}
	if len(inStep) != step.Groups {
		return fmt.Errorf("%d groups in the body, %d in its header", len(inStep), step.Groups)
	}
	for _, v := range inStep {
		lag := version - v
		tr.staleMax = max(tr.staleMax, lag)
		tr.staleness[min(max(lag, 0), 2)]++
	}
	return nil
}

// settle waits until the service has nothing in flight and the simulator
// is idle, twice in a row 100 ms apart: the staleness bound stopped
// admission and the last groups are finished.
func settle(ctx context.Context, srv *harness.SimHTTP, url string) error {
	c := client.New(url, "")
	quiet := 0
	for quiet < 2 {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		sim := srv.Stats()
		if st.InGeneration == 0 && st.InEnvironment == 0 && sim.Running == 0 && sim.Queued == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("the service did not settle: %w", err)
		}
	}
	return nil
}

// finished is what the service committed: data/ (kept groups, served
// or queued) and filtered/ (groups the keep rule dropped; those dropped
// as stale counted apart: their tokens are thrown away).
type finished struct {
	tokens int64 // completion_tokens of every row but the stale groups'
	// stale are the completion tokens of the groups dropped as stale
	// (filter_reason stale: thrown away, their prompts sampled again).
	// Those the service found too stale to serve count too (in data/,
	// listed stale in served/state.json).
	stale                      int64
	kept, dropped, staleGroups int // groups
	// routed counts the kept rows whose routed_experts is not null.
	routed int
}

// readFinished reads the decode tokens and groups of out's data/ and
// filtered/ back. The groups in data/ that the service found too stale
// to serve (served/state.json's stale) count as stale: their tokens are
// thrown away.
func readFinished(ctx context.Context, out string) (finished, error) {
	var fin finished
	var st struct {
		Stale [][2]int64 `json:"stale"`
	}
	b, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile))
	if err != nil {
		return fin, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fin, fmt.Errorf("%s: %w", schema.ServeStateFile, err)
	}
	unserved := map[[2]int64]bool{}
	for _, g := range st.Stale {
		unserved[g] = true
	}
	for _, sub := range []string{schema.DataDir, schema.FilteredDir} {
		paths, err := filepath.Glob(filepath.Join(out, sub, schema.PartGlob))
		if err != nil {
			return fin, err
		}
		seen, stale := map[string]bool{}, map[string]bool{}
		for _, p := range paths {
			f, err := pqread.Open(p, memory.NewGoAllocator(), 4096)
			if err != nil {
				return fin, err
			}
			cols, err := f.Fields(schema.ColumnName(schema.ColCompletionTokens), schema.ColumnName(schema.ColGroupID), schema.ColumnName(schema.ColFilterReason),
				schema.ColumnName(schema.ColTaskIndex), schema.ColumnName(schema.ColAttempt), schema.ColumnName(schema.ColRoutedExperts))
			if err == nil {
				err = f.Records(ctx, cols, func(rec arrow.Record) error {
					toks, ok1 := rec.Column(0).(*array.Int64)
					gid, ok2 := rec.Column(1).(*array.String)
					reason, ok3 := rec.Column(2).(*array.String)
					task, ok4 := rec.Column(3).(*array.Int64)
					attempt, ok5 := rec.Column(4).(*array.Int32)
					if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
						return fmt.Errorf("unexpected columns %s", rec.Schema())
					}
					for i := range int(rec.NumRows()) {
						if reason.Value(i) == groups.ReasonStale || unserved[[2]int64{task.Value(i), int64(attempt.Value(i))}] {
							fin.stale += toks.Value(i)
							stale[gid.Value(i)] = true
							continue
						}
						fin.tokens += toks.Value(i)
						seen[gid.Value(i)] = true
						if sub == schema.DataDir && rec.Column(5).IsValid(i) {
							fin.routed++
						}
					}
					return nil
				})
			}
			_ = f.Close() // best effort: read only
			if err != nil {
				return fin, fmt.Errorf("%s: %w", p, err)
			}
		}
		if sub == schema.DataDir {
			fin.kept = len(seen)
		} else {
			fin.dropped = len(seen)
		}
		fin.staleGroups += len(stale)
	}
	return fin, nil
}
