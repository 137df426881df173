package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/storage"
)

// boot is a service being started: what its steps (Steps) built, for
// the steps after them and for the loop that serves.
type boot struct {
	cfg   *config.Config
	opts  Options
	every time.Duration // run.progress: the service's own line
	logf  func(format string, args ...any)
	token string

	dir         string // OUTPUT/served (a replay's: OUTPUT/replay)
	stepsDir    string // a replay's recorded steps (OUTPUT/served)
	st          *state
	stopService context.CancelFunc
	s           *service
	stale       *groups.Staleness
	ln          net.Listener
	loads       *loader
	runDone     chan error
	closers     []func() error
}

// Step is one named step of starting a service; its closer, when it
// returns one, undoes it when the service stops, the steps' closers in
// the reverse order of the steps.
type Step struct {
	Name string
	do   func(b *boot, ctx context.Context) (closer func() error, err error)
}

// Steps are the steps Run walks, in this order: the config checked; the
// locks (the output directory's, so that no run writes it meanwhile, and
// the served directory's, so that no other service hands out its steps),
// taken before anything is announced; the recorded state; the ledger
// over it; the groups committed before the start queued and the steps a
// crash left unwritten written again; the staleness gate; serve.eval's
// evaluations; the HTTP listener; the loader of the files the run
// commits; the run.
var Steps = []Step{
	{Name: "config", do: (*boot).check},
	{Name: "lock", do: (*boot).lock},
	{Name: "state", do: (*boot).state},
	{Name: "ledger", do: (*boot).ledger},
	{Name: "queue", do: (*boot).queue},
	{Name: "staleness", do: (*boot).staleness},
	{Name: "eval", do: (*boot).eval},
	{Name: "http", do: (*boot).listen},
	{Name: "loader", do: (*boot).loader},
	{Name: "run", do: (*boot).run},
}

// newBoot prepares the steps of a service of cfg (a copy: the service
// sets the run's keys it needs).
func newBoot(cfg *config.Config, opts Options) *boot {
	own := *cfg
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	stderr := own.Redactor().Writer(opts.Stderr)
	var logMu sync.Mutex
	return &boot{cfg: &own, opts: opts, logf: func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(stderr, "trajflow serve: "+format+"\n", args...)
	}}
}

// walk runs the steps in order, keeping each closer; it stops at the
// first error.
func (b *boot) walk(ctx context.Context) error {
	for _, s := range Steps {
		closer, err := s.do(b, ctx)
		if closer != nil {
			b.closers = append(b.closers, closer)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// close runs the closers of the steps that ran, last first, and returns
// their errors joined.
func (b *boot) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	return errors.Join(errs...)
}

// check is the config step: every problem serve would meet (Check); then
// the run's keys serve sets: a dropped group is committed too
// (filtered/), so that a restart never samples its prompt again;
// finished groups become servable at serve.commit_interval; the run's
// progress feeds the status, the service printing its own line every
// run.progress.
func (b *boot) check(context.Context) (func() error, error) {
	if err := Check(b.cfg, b.opts); err != nil {
		return nil, err
	}
	if name := b.cfg.Serve.TokenEnv; name != "" {
		b.token, _ = b.opts.lookupEnv()(name)
	}
	b.cfg.Output.Filtered = true
	b.cfg.Output.Parquet.CommitInterval = b.cfg.Serve.CommitInterval
	b.every = b.cfg.Run.Progress.D()
	b.cfg.Run.Progress = config.Duration(250 * time.Millisecond)
	return nil, nil
}

// lock takes the output directory's lock, handed to the run
// (runner.Continuous.Locked), and the served directory's: another run or
// service of the output stops here, before the service says it serves.
// The locks are what let the next one in: a failed release is an error
// of this service's.
func (b *boot) lock(context.Context) (func() error, error) {
	b.dir = filepath.Join(b.cfg.Output.Dir, schema.ServedDir)
	if err := durable.MkdirAll(b.dir, 0o755); err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	unlockOut, err := resume.LockDir(b.cfg.Output.Dir)
	if err != nil {
		return nil, err
	}
	unlockServed, err := lock(b.dir)
	if err != nil {
		return nil, errors.Join(err, unlockOut())
	}
	// A service killed between a rename and its directory's sync left a
	// state or a step this one would serve from and a power cut would
	// take back: made durable first (the run syncs the rest of the
	// output directory before it commits: runner/output.Sync).
	if err := durable.SyncTree(b.dir); err != nil {
		return nil, errors.Join(fmt.Errorf("output.dir: %w", err), unlockServed(), unlockOut())
	}
	return func() error { return errors.Join(unlockServed(), unlockOut()) }, nil
}

// state reads the recorded state and removes the step folders it does
// not record.
func (b *boot) state(context.Context) (func() error, error) {
	st, err := loadState(b.dir)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if err := removeStale(b.dir, st); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	b.st = st
	return nil, nil
}

// ledger builds the service over the recorded state. The look-ahead:
// serve.buffer_steps steps, at least the kept groups that keep
// generate.concurrency busy; under serve.max_staleness, what the
// staleness bound allows. Its closer writes the folders of the steps
// answered (after the HTTP server stopped: no new step comes) and ends
// the service.
func (b *boot) ledger(context.Context) (func() error, error) {
	cfg := b.cfg
	sctx, stop := context.WithCancel(context.Background())
	b.stopService = stop
	s, err := newService(serviceConfig{
		Dir: b.dir, StepsDir: b.stepsDir, State: b.st, Ctx: sctx,
		Lease: cfg.Serve.Lease.D(), PauseTimeout: cfg.Serve.PauseLimit(), Buffer: *cfg.Serve.BufferSteps, MaxK: cfg.Serve.MaxGroupsPerStep,
		Fill:      fillGroups(cfg.Generate.Concurrency, cfg.Repeat.N),
		Staleness: cfg.Serve.Staleness(), OnStale: cfg.Serve.OnStale, Unserved: groups.NewUnserved(),
		StaleWindow: staleWindow(cfg.Serve.StepGroups),
		Supply:      groups.NewSupply(0),
		Parquet: parquet.Options{
			FileRows: 1 << 40, FileBytes: 1 << 62, // one part file per step
			RowGroupRows: cfg.Output.Parquet.RowGroupRows,
			Compression:  cfg.Output.Parquet.Compression,
		},
	})
	if err != nil {
		stop()
		return nil, err
	}
	b.s = s
	if st := b.st; st.Paused != "" {
		// Paused when it stopped: it stays paused until POST /v1/resume.
		b.logf("paused (%s) as when it stopped, at policy version %d, since %s by %s: POST /v1/resume to go on", st.Paused, st.Policy, st.PausedAt.Format(time.RFC3339), st.PausedBy)
	}
	return func() error {
		s.waitWrites()
		s.led.close()
		stop()
		return nil
	}, nil
}

// queue queues what earlier runs committed and no step holds, and writes
// again the folder of a step the state records that a crash left
// unwritten (a step is served once the state records it, its folder
// written beside).
func (b *boot) queue(ctx context.Context) (func() error, error) {
	paths, err := filepath.Glob(filepath.Join(b.cfg.Output.Dir, schema.DataDir, schema.PartGlob))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := b.s.loadFile(ctx, p); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if err := b.s.rebuildSteps(ctx, b.st, paths); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return nil, nil
}

// staleness builds serve.max_staleness's capacity gate over the fleet's
// policy, counting what earlier runs accepted (served or queued).
func (b *boot) staleness(context.Context) (func() error, error) {
	cfg := b.cfg
	bound := cfg.Serve.Staleness()
	if bound == nil {
		return nil, nil
	}
	stale, err := groups.NewStaleness(groups.StalenessOptions{
		Bound: *bound, OnStale: cfg.Serve.OnStale, Accepted: b.s.led.accepted(),
	}, b.s.policy)
	if err != nil {
		return nil, fmt.Errorf("serve.max_staleness: %w", err)
	}
	b.s.led.setDiscard(stale.Discard)
	b.stale = stale
	return nil, nil
}

// eval sets up serve.eval's evaluations: the results written before a
// restart read back, and the evaluation of the current version started
// when it is due and has none. Its closer waits for an evaluation in
// flight, cancelled with the service.
func (b *boot) eval(context.Context) (func() error, error) {
	e := newEvaluator(b.s.ctx, b.cfg, b.logf)
	if e == nil {
		return nil, nil
	}
	// The evaluation set is checked now, not at the first version due.
	if err := runner.Check(e.cfg, runner.Options{Env: b.opts.Env, Client: b.opts.Client, LookupEnv: b.opts.LookupEnv}); err != nil {
		return nil, fmt.Errorf("serve.eval: %w", err)
	}
	if p := e.cfg.Source.Path; !storage.IsURL(p) {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("serve.eval.source.path: %w", err)
		}
	}
	if err := e.load(); err != nil {
		return nil, fmt.Errorf("serve.eval: %w", err)
	}
	b.s.eval = e
	e.onVersion(b.s.led.version())
	return func() error { e.close(); return nil }, nil
}

// listen listens on serve.addr and serves the API; its closer stops the
// service's work and shuts the server down.
func (b *boot) listen(context.Context) (func() error, error) {
	ln, err := net.Listen("tcp", b.cfg.Serve.Addr)
	if err != nil {
		return nil, fmt.Errorf("serve.addr: %w", err)
	}
	b.ln = ln
	h := &handler{s: b.s, token: b.token, pauseMode: generate.PauseMode(b.cfg.Serve.PauseMode), logf: b.logf, driftRatio: b.cfg.Serve.DriftRatio}
	srv := &http.Server{Handler: h.routes(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.logf("%v", err)
		}
	}()
	return func() error {
		b.stopService()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut) // best effort: the service is stopping
		<-done
		return nil
	}, nil
}

// loader reads the data files the run commits into the queue, in order,
// off the run's commit path.
func (b *boot) loader(context.Context) (func() error, error) {
	sctx := b.s.ctx
	b.loads = newLoader(sctx, func(path string) {
		if err := b.s.loadFile(sctx, path); err != nil && sctx.Err() == nil {
			b.logf("%v", err)
		}
	})
	return func() error { b.loads.stop(); return nil }, nil
}

// run starts the pipeline, continuous, its demand set by the trainers'
// requests (runner.Run in the background; the serving loop waits for it).
func (b *boot) run(ctx context.Context) (func() error, error) {
	s := b.s
	ropts := runner.Options{
		Stderr: b.opts.Stderr, Client: b.opts.Client, Env: b.opts.Env, Abort: b.opts.Abort,
		LookupEnv: b.opts.LookupEnv, AllowConfigChange: b.opts.AllowConfigChange,
		Continuous: &runner.Continuous{
			Policy: s.policy, Staleness: b.stale, Supply: s.supply, Unserved: s.unserved, OnCommit: func(path string, _ int) { b.loads.add(path) },
			Collector: collector{s}, Checked: true, Locked: true,
		},
		Progress: s.setSnapshot,
	}
	b.runDone = make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, b.cfg, ropts)
		b.runDone <- err
	}()
	return nil, nil
}

// serve announces the service and serves until ctx is cancelled and the
// run has stopped (its finished groups committed), or the run fails: it
// takes back the leases run out and records the stale groups at every
// tick, and prints or hands out the progress.
func (b *boot) serve(ctx context.Context) error {
	s := b.s
	tickEvery := s.led.lease / 10
	if pt := b.cfg.Serve.PauseLimit(); pt > 0 {
		tickEvery = min(tickEvery, pt/10)
	}
	tick := time.NewTicker(max(min(tickEvery, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	var progress <-chan time.Time
	every := b.every
	if b.opts.Progress != nil {
		every = 500 * time.Millisecond
	}
	if every > 0 {
		pt := time.NewTicker(every)
		defer pt.Stop()
		progress = pt.C
	}
	if b.opts.Listening != nil {
		b.opts.Listening(b.ln.Addr())
	}
	b.logf("serving on http://%s (output %s)", b.ln.Addr(), b.cfg.Output.Dir)
	var runErr error
	running := true
	for running || ctx.Err() == nil {
		select {
		case err := <-b.runDone:
			running = false
			runErr = err
			b.loads.wait()
			if err != nil && ctx.Err() == nil {
				// A fatal error of the run: no more groups come.
				s.led.end(err)
				return err
			}
			if ctx.Err() == nil {
				b.logf("the input ran out; the steps committed are still served")
				s.led.end(nil)
			}
		case <-tick.C:
			b.tick()
		case <-progress:
			if b.opts.Progress != nil {
				b.opts.Progress(s.snapshot(), s.status())
			} else {
				b.logf("%s", progressLine(s.status()))
			}
		case <-ctx.Done():
			if !running {
				return runErr
			}
			// The run stops on the same cancel; wait for its commits.
			runErr = <-b.runDone
			running = false
			b.loads.wait()
		}
	}
	return runErr
}

// tick is the service's periodic work: leases run out taken back, the
// groups found stale recorded, the stale guard checked, a pause past
// serve.pause_timeout ended.
func (b *boot) tick() {
	led := b.s.led
	led.tick()
	if err := led.recordStale(); err != nil {
		b.logf("%v", err)
	}
	if line := led.staleCheck(); line != "" {
		b.logf("%s", line)
	}
	switch p, err := led.expirePause(); {
	case err != nil:
		b.logf("%v", err)
	case p != nil:
		b.logf("resumed: the pause (%s) by %s since %s was not resumed within serve.pause_timeout (%s)", p.Mode, p.By, p.Since.Format(time.RFC3339), b.cfg.Serve.PauseLimit())
	}
}
