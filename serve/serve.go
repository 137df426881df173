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
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/storage"
)

// Options are the settings of Run that are not part of the config.
type Options struct {
	// Stderr receives the service's log lines and the run's warnings,
	// through the config's redactor; nil discards them.
	Stderr io.Writer
	// Client and Env replace the config's endpoints and environment, as
	// for runner.Run.
	Client inference.Client
	Env    envs.Env
	// Abort, closed after ctx was cancelled, ends the graceful stop at
	// once (the command's second signal).
	Abort <-chan struct{}
	// LookupEnv reads the token's variable (serve.token_env) and the
	// shard's; default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// AllowConfigChange resumes an output whose committed work came from
	// a config with other semantic keys.
	AllowConfigChange bool
	// Listening, when set, hears the address the service listens on once
	// it accepts requests.
	Listening func(addr net.Addr)
	// Progress, when set, receives the run's progress and the service's
	// status twice a second instead of the plain line on Stderr every
	// run.progress (the command line draws a live view with it).
	Progress func(runner.Snapshot, client.Status)
}

func (o Options) lookupEnv() func(string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv
	}
	return os.LookupEnv
}

// Check reports every problem of the config that serve would meet before
// anything is created: the run's (runner.Check), the keys serve cannot
// honour, and the bearer token's variable. The error is a
// *config.ValidationError naming each key.
func Check(cfg *config.Config, opts Options) error {
	if err := runner.Check(cfg, runner.Options{Env: opts.Env, Client: opts.Client, LookupEnv: opts.LookupEnv}); err != nil {
		return err
	}
	var p pipeline.Problems
	if cfg.Groups.Target != 0 {
		p.Add("groups.target", "serve sizes each step by its request (GET /v1/steps/next?groups=K); leave groups.target unset")
	}
	if storage.IsURL(cfg.Output.Dir) {
		p.Add("output.dir", "serve needs a local directory")
	}
	if cfg.Source.Shard.Sharded() || cfg.Source.Shard.Auto {
		p.Add("source.shard", "serve reads the whole input; leave source.shard unset")
	}
	if cfg.Serve.NeedsToken() && cfg.Serve.TokenEnv == "" {
		p.Add("serve.token_env", "required: serve.addr %s is not a loopback address, and anyone who can reach it could take steps or pause the fleet; name the environment variable holding a bearer token", cfg.Serve.Addr)
	}
	if name := cfg.Serve.TokenEnv; name != "" {
		if v, ok := opts.lookupEnv()(name); !ok || v == "" {
			p.Add("serve.token_env", "the variable %s is unset or empty: it must hold the bearer token", name)
		}
	}
	return cfg.Locate(p.Err())
}

// Run serves training steps from the pipeline the config describes until
// ctx is cancelled: it runs the pipeline continuously (runner.Run), its
// demand set by the trainers' requests, commits kept groups to data/ as a
// run does, and hands them out as steps over HTTP (docs/serve.md). A
// cancel of ctx stops it as a run stops (run.on_signal, run.grace): the
// finished groups are committed and the served state is whole.
func Run(ctx context.Context, cfg *config.Config, opts Options) (err error) {
	own := *cfg
	cfg = &own
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if err := Check(cfg, opts); err != nil {
		return err
	}
	red := cfg.Redactor()
	stderr := red.Writer(opts.Stderr)
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(stderr, "trajflow serve: "+format+"\n", args...)
	}
	var token string
	if cfg.Serve.TokenEnv != "" {
		token, _ = opts.lookupEnv()(cfg.Serve.TokenEnv)
	}

	// A dropped group is committed too (filtered/), so that a restart
	// never samples its prompt again; finished groups become servable at
	// serve.commit_interval.
	cfg.Output.Filtered = true
	cfg.Output.Parquet.CommitInterval = cfg.Serve.CommitInterval
	// The run's progress feeds the status; the service prints its own
	// line every run.progress.
	every := cfg.Run.Progress.D()
	cfg.Run.Progress = config.Duration(250 * time.Millisecond)

	dir := filepath.Join(cfg.Output.Dir, schema.ServedDir)
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	unlock, err := lock(dir)
	if err != nil {
		return err
	}
	defer func() {
		// The lock is what lets the next service in: a failed release is
		// an error of this one's.
		err = errors.Join(err, unlock())
	}()
	st, err := loadState(dir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := removeStale(dir, st); err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	// The look-ahead: serve.buffer_steps steps, at least the kept groups
	// that keep generate.concurrency busy; under serve.max_staleness, what
	// the staleness bound allows.
	var bound func(int64) int
	if cfg.Serve.MaxStaleness != nil {
		bound = staleBound(*cfg.Serve.MaxStaleness, cfg.Serve.StepGroups)
	}
	sctx, stopService := context.WithCancel(context.Background())
	defer stopService()
	s, err := newService(serviceConfig{
		Dir: dir, State: st, Ctx: sctx,
		Lease: cfg.Serve.Lease.D(), PauseTimeout: cfg.Serve.PauseTimeout.D(), Buffer: *cfg.Serve.BufferSteps, MaxK: cfg.Serve.MaxGroupsPerStep,
		Fill: fillGroups(cfg.Generate.Concurrency, cfg.Repeat.N), Bound: bound,
		MaxStaleness: cfg.Serve.MaxStaleness, OnStale: cfg.Serve.OnStale, Unserved: groups.NewUnserved(),
		StaleWindow: staleWindow(cfg.Serve.StepGroups),
		Supply:      groups.NewSupply(0),
		Parquet: parquet.Options{
			FileRows: 1 << 40, FileBytes: 1 << 62, // one part file per step
			RowGroupRows: cfg.Output.Parquet.RowGroupRows,
			Compression:  cfg.Output.Parquet.Compression,
		},
	})
	if err != nil {
		return err
	}
	defer s.led.close()
	// The folders of the steps answered are written before the service
	// returns (after the HTTP server stopped: no new step comes).
	defer s.waitWrites()
	if st.Paused != "" {
		// Paused when it stopped: it stays paused until POST /v1/resume.
		logf("paused (%s) as when it stopped, at policy version %d, since %s by %s: POST /v1/resume to go on", st.Paused, st.Policy, st.PausedAt.Format(time.RFC3339), st.PausedBy)
	}

	// What earlier runs committed and no step holds is queued first.
	paths, err := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, schema.PartGlob))
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := s.loadFile(ctx, p); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	// A step is served once the state records it, its folder written
	// beside: one a crash left unwritten is written again from data/.
	if err := s.rebuildSteps(ctx, st, paths); err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	// serve.max_staleness: the capacity gate over the fleet's policy,
	// counting what earlier runs accepted (served or queued).
	var stale *groups.Staleness
	if cfg.Serve.MaxStaleness != nil {
		stale, err = groups.NewStaleness(groups.StalenessOptions{
			MaxStaleness: *cfg.Serve.MaxStaleness, BatchSize: cfg.Serve.StepGroups,
			OnStale: cfg.Serve.OnStale, Accepted: s.led.accepted(),
		}, s.policy)
		if err != nil {
			return fmt.Errorf("serve.max_staleness: %w", err)
		}
		s.led.setDiscard(stale.Discard)
	}

	ln, err := net.Listen("tcp", cfg.Serve.Addr)
	if err != nil {
		return fmt.Errorf("serve.addr: %w", err)
	}
	h := &handler{s: s, token: token, pauseMode: generate.PauseMode(cfg.Serve.PauseMode), logf: logf}
	srv := &http.Server{Handler: h.routes(), ReadHeaderTimeout: 10 * time.Second}
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("%v", err)
		}
	}()
	defer func() {
		stopService()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
		<-srvDone
	}()

	// Data files the run commits are read into the queue in order, off
	// the run's commit path.
	loads := newLoader(sctx, func(path string) {
		if err := s.loadFile(sctx, path); err != nil && sctx.Err() == nil {
			logf("%v", err)
		}
	})
	defer loads.stop()
	ropts := runner.Options{
		Stderr: opts.Stderr, Client: opts.Client, Env: opts.Env, Abort: opts.Abort,
		LookupEnv: opts.LookupEnv, AllowConfigChange: opts.AllowConfigChange,
		Continuous: &runner.Continuous{
			Policy: s.policy, Staleness: stale, Supply: s.supply, Unserved: s.unserved, OnCommit: func(path string, _ int) { loads.add(path) },
			Collector: collector{s}, Checked: true,
		},
		Progress: s.setSnapshot,
	}
	runDone := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, cfg, ropts)
		runDone <- err
	}()
	tickEvery := s.led.lease / 10
	if pt := cfg.Serve.PauseTimeout.D(); pt > 0 {
		tickEvery = min(tickEvery, pt/10)
	}
	tick := time.NewTicker(max(min(tickEvery, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	var progress <-chan time.Time
	if opts.Progress != nil {
		every = 500 * time.Millisecond
	}
	if every > 0 {
		pt := time.NewTicker(every)
		defer pt.Stop()
		progress = pt.C
	}
	if opts.Listening != nil {
		opts.Listening(ln.Addr())
	}
	logf("serving on http://%s (output %s)", ln.Addr(), cfg.Output.Dir)
	var runErr error
	running := true
	for running || ctx.Err() == nil {
		select {
		case err := <-runDone:
			running = false
			runErr = err
			loads.wait()
			if err != nil && ctx.Err() == nil {
				// A fatal error of the run: no more groups come.
				s.led.end(err)
				return err
			}
			if ctx.Err() == nil {
				logf("the input ran out; the steps committed are still served")
				s.led.end(nil)
			}
		case <-tick.C:
			s.led.tick()
			if err := s.led.recordStale(); err != nil {
				logf("%v", err)
			}
			if line := s.led.staleCheck(); line != "" {
				logf("%s", line)
			}
			switch p, err := s.led.expirePause(); {
			case err != nil:
				logf("%v", err)
			case p != nil:
				logf("resumed: the pause (%s) by %s since %s was not resumed within serve.pause_timeout (%s)", p.Mode, p.By, p.Since.Format(time.RFC3339), cfg.Serve.PauseTimeout.D())
			}
		case <-progress:
			if opts.Progress != nil {
				opts.Progress(s.snapshot(), s.status())
			} else {
				logf("%s", progressLine(s.status()))
			}
		case <-ctx.Done():
			if !running {
				return runErr
			}
			// The run stops on the same cancel; wait for its commits.
			runErr = <-runDone
			running = false
			loads.wait()
		}
	}
	return runErr
}

// progressLine is the service's periodic line on stderr.
func progressLine(st client.Status) string {
	paused := ""
	if st.Paused {
		paused = " (paused, " + st.PauseMode + ")"
	}
	return fmt.Sprintf("steps %d made, %d acked, %d leased, %d to serve again; %d groups queued, %d requests waiting; policy v%d%s; in flight %d gen %d env; keep rate %.2f",
		st.Steps.Made, st.Steps.Acked, st.Steps.Leased, st.Steps.Pending, st.QueuedGroups, len(st.Waiting), st.PolicyVersion, paused, st.InGeneration, st.InEnvironment, st.KeepRate)
}
