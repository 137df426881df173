package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/schema"
)

// errReplayed: a replay has no step left to hand out (503, reason ended).
var errReplayed = errors.New("the replay served every recorded step")

// ReplaySteps are the steps Replay walks: the serve section checked; the
// output directory's lock (no run or service writes it meanwhile) and
// the replay's own (OUTPUT/replay); the replay's state, or, on its first
// start, the recorded one with every step to serve again; the ledger
// over it, reading the recorded steps' folders; the recorded steps
// checked; the HTTP listener.
var ReplaySteps = []Step{
	{Name: "config", do: (*boot).replayCheck},
	{Name: "lock", do: (*boot).replayLock},
	{Name: "state", do: (*boot).replayState},
	{Name: "ledger", do: (*boot).ledger},
	{Name: "steps", do: (*boot).replaySteps},
	{Name: "http", do: (*boot).listen},
}

// Replay serves the steps a service recorded in the output directory out
// (served/state.json and its step folders) to trainers through the same
// API, in the same order, with the same rows, versions and step numbers,
// and generates nothing: no engine, no run. Each answer is the bytes the
// step was first served as, in every format. Leases, acks, ranks, the
// policy version, pauses and the status are the replay's own, recorded
// in OUTPUT/replay across restarts (a kill -9 included); the recording
// is never changed. A step recorded without its folder is said (logged,
// and in the answer that no step is left), never invented. sc is the
// serve section (addr, lease, token_env, …).
func Replay(ctx context.Context, out string, sc config.Serve, opts Options) (err error) {
	cfg := &config.Config{Serve: sc}
	cfg.Output.Dir = out
	b := newBoot(cfg, opts)
	defer func() { err = errors.Join(err, b.close()) }()
	for _, s := range ReplaySteps {
		closer, err := s.do(b, ctx)
		if closer != nil {
			b.closers = append(b.closers, closer)
		}
		if err != nil {
			return err
		}
	}
	return b.replayServe(ctx)
}

// replayCheck checks the serve section and the bearer token's variable.
func (b *boot) replayCheck(context.Context) (func() error, error) {
	b.cfg.Serve.SetDefaults()
	if err := b.cfg.Serve.Validate(); err != nil {
		return nil, fmt.Errorf("serve.%w", err)
	}
	if b.cfg.Serve.NeedsToken() && b.cfg.Serve.TokenEnv == "" {
		return nil, fmt.Errorf("serve.token_env: required: serve.addr %s is not a loopback address", b.cfg.Serve.Addr)
	}
	if name := b.cfg.Serve.TokenEnv; name != "" {
		v, ok := b.opts.lookupEnv()(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("serve.token_env: the variable %s is unset or empty: it must hold the bearer token", name)
		}
		b.token = v
	}
	b.every = 5 * time.Second
	return nil, nil
}

// replayLock takes the output directory's lock and the replay's.
func (b *boot) replayLock(context.Context) (func() error, error) {
	out := b.cfg.Output.Dir
	if st, err := os.Stat(filepath.Join(out, schema.ServedDir, schema.ServeStateFile)); err != nil || st.IsDir() {
		return nil, fmt.Errorf("replay: %s holds no recorded steps (%s): serve it first", out, filepath.Join(schema.ServedDir, schema.ServeStateFile))
	}
	b.dir = filepath.Join(out, schema.ReplayDir)
	b.stepsDir = filepath.Join(out, schema.ServedDir)
	if err := durable.MkdirAll(b.dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	unlockOut, err := resume.LockDir(out)
	if err != nil {
		return nil, err
	}
	unlockReplay, err := lock(b.dir)
	if err != nil {
		return nil, errors.Join(err, unlockOut())
	}
	return func() error { return errors.Join(unlockReplay(), unlockOut()) }, nil
}

// replayState reads the replay's state; on the first start, the recorded
// state with every step to serve again: none acknowledged or leased, no
// drift, the policy at version 0 and not paused.
func (b *boot) replayState(context.Context) (func() error, error) {
	_, err := os.Stat(filepath.Join(b.dir, schema.ServeStateFile))
	if err == nil {
		b.st, err = loadState(b.dir)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		return nil, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replay: %w", err)
	}
	rec, err := loadState(b.stepsDir)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	st := &state{Version: stateVersion, Next: rec.Next}
	for _, s := range rec.Steps {
		c := *s
		c.Acked, c.LeasedUntil, c.LeasedRank, c.RankLeases, c.RanksAcked, c.Drift = false, time.Time{}, 0, nil, nil, nil
		st.Steps = append(st.Steps, &c)
	}
	b.st = st
	return nil, nil
}

// replaySteps checks that every recorded step's folder is there: one
// that is not is said (logged) and never served (left out of the
// replay's state). No step is made: the
// ledger has ended, so a trainer asking once every step was served is
// told so.
func (b *boot) replaySteps(context.Context) (func() error, error) {
	led := b.s.led
	var missing []int64
	led.mu.Lock()
	n := len(led.st.Steps)
	next := led.st.clone()
	next.Steps = nil
	for _, st := range led.st.Steps {
		if _, err := os.Stat(b.s.stepFile(st.Step)); err != nil {
			missing = append(missing, st.Step)
			b.logf("step %d is recorded but %s is missing: it is not replayed", st.Step, b.s.stepFile(st.Step))
			delete(led.steps, st.Step)
			continue
		}
		next.Steps = append(next.Steps, st)
	}
	led.st = next
	led.mu.Unlock()
	msg := fmt.Errorf("%w: the %d steps recorded in %s", errReplayed, n, b.stepsDir)
	if len(missing) > 0 {
		msg = fmt.Errorf("%w (steps %v could not be: their folders are missing)", msg, missing)
	}
	led.end(msg)
	return nil, nil
}

// replayServe announces the replay and serves until ctx is cancelled,
// taking back the leases run out and ending a pause past
// serve.pause_timeout at every tick.
func (b *boot) replayServe(ctx context.Context) error {
	tick := time.NewTicker(max(min(b.s.led.lease/10, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	var progress <-chan time.Time
	if b.every > 0 && b.opts.Stderr != io.Discard {
		pt := time.NewTicker(b.every)
		defer pt.Stop()
		progress = pt.C
	}
	if b.opts.Listening != nil {
		b.opts.Listening(b.ln.Addr())
	}
	b.logf("serving on http://%s (a replay of the steps recorded in %s: nothing is generated)", b.ln.Addr(), b.stepsDir)
	for {
		select {
		case <-tick.C:
			b.tick()
		case <-progress:
			b.logf("%s", progressLine(b.s.status()))
		case <-ctx.Done():
			return nil
		}
	}
}
