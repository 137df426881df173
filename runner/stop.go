package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/build"
)

// Why a run stops before its input ends. Each is returned wrapped, with
// the finished groups committed and metrics.json written (unless the stop
// overran run.grace or was aborted).
var (
	// ErrInterrupted: the run's context was cancelled (a signal). It also
	// matches context.Canceled.
	ErrInterrupted = build.ErrInterrupted
	// ErrEndpoint: the inference endpoints cannot serve the run: the check
	// before the run failed, or the circuit breaker opened during it.
	ErrEndpoint = build.ErrEndpoint
	// ErrErrorRate: the share of error rollouts exceeded run.max_error_rate.
	ErrErrorRate = errors.New("too many rollouts failed")
	// ErrAborted: Options.Abort was closed (a second signal): the run
	// stopped at once; what was not committed yet is dropped.
	ErrAborted = errors.New("aborted")
	// ErrGraceExceeded: a stop took longer than run.grace: what was not
	// committed by then is dropped.
	ErrGraceExceeded = errors.New("the stop took longer than run.grace")
)

// errorRateMin is the number of resolved rollouts from which
// run.max_error_rate is checked while the run goes; the end of a run checks
// it whatever the number.
const errorRateMin = 100

// stopper is a run's graceful stop. A stop (the run's context cancelled,
// or a fatal error) ends admission at once: the source hands out no more
// groups. What is in flight is cancelled (run.on_signal: cancel, and every
// fatal error) or may finish (drain) until grace minus a commit reserve;
// groups already resolved flow on to collate and the sinks, which close
// normally and commit. If the stop has not ended after run.grace, or the
// caller aborts, the hard context is cancelled: uncommitted work is dropped.
type stopper struct {
	once   sync.Once
	began  chan struct{} // closed when the stop begins
	mu     sync.Mutex
	cause  error
	timers []*time.Timer
	// hard is the graph's context; cancelling it drops uncommitted work.
	hard       context.Context
	cancelHard context.CancelCauseFunc
}

func newStopper(parent context.Context) *stopper {
	hard, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &stopper{began: make(chan struct{}), hard: hard, cancelHard: cancel}
}

// stopping reports whether a stop began.
func (s *stopper) stopping() bool {
	select {
	case <-s.began:
		return true
	default:
		return false
	}
}

// err is why the run stopped, nil when it did not.
func (s *stopper) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// release stops the timers and frees the hard context.
func (s *stopper) release() {
	s.mu.Lock()
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	s.cancelHard(context.Canceled)
}

// watch begins a stop when ctx is cancelled and aborts when abort closes,
// until done closes.
func (r *run) watch(ctx context.Context, abort <-chan struct{}, done <-chan struct{}) {
	select {
	case <-ctx.Done():
		r.stop(fmt.Errorf("%w (%v)", ErrInterrupted, context.Cause(ctx)), r.cfg.Run.OnSignal == "drain")
	case <-abort:
	case <-done:
		return
	}
	select {
	case <-abort:
		r.stopper.cancelHard(ErrAborted)
	case <-done:
	}
}

// stop begins the run's graceful stop for cause (the first cause wins):
// no more groups are admitted, and what is in flight is cancelled, or with
// drain may finish until the grace period's commit reserve.
func (r *run) stop(cause error, drain bool) {
	s := r.stopper
	s.once.Do(func() {
		s.mu.Lock()
		s.cause = cause
		grace := r.cfg.Run.Grace.D()
		if drain {
			reserve := min(5*time.Second, grace/4)
			s.timers = append(s.timers, time.AfterFunc(grace-reserve, r.cancelInFlight))
		}
		s.timers = append(s.timers, time.AfterFunc(grace, func() { s.cancelHard(ErrGraceExceeded) }))
		s.mu.Unlock()
		close(s.began)
		fmt.Fprintf(r.opts.Stderr, "trajflow: stopping: %v; committing finished groups (within run.grace, %s)\n", cause, grace)
		if r.flow.ctl != nil {
			r.flow.ctl.Stop()
		}
		if !drain {
			r.cancelInFlight()
		}
	})
}

// cancelInFlight cancels every rollout in the loop and every one still to
// come: they resolve as cancelled.
func (r *run) cancelInFlight() {
	if r.flow.loop != nil {
		r.flow.loop.Stop()
	}
}

// fail stops the run for a fatal error: what is in flight is cancelled,
// the finished groups are committed, and the run returns err.
func (r *run) fail(err error) { r.stop(err, false) }

// cutOff reports whether g was cut off by a stop: a member was cancelled
// by it. Such a group is not committed; a resumed run redoes it.
func (r *run) cutOff(g *pipeline.Group) bool {
	if !r.stopper.stopping() {
		return false
	}
	for _, ro := range g.Rollouts {
		if ro.Status == pipeline.StatusCancelled {
			return true
		}
	}
	return false
}

// checkErrorRate stops the run once enough rollouts resolved and the share
// of errors among them exceeds run.max_error_rate; final checks it at
// the end of a run whatever the number. It returns the error it stopped
// for.
func (r *run) checkErrorRate(final bool) error {
	limit := r.cfg.Run.ErrorRateLimit()
	errs, done := r.stats.Failed()
	if done == 0 || (!final && done < errorRateMin) || float64(errs) <= limit*float64(done) {
		return nil
	}
	err := fmt.Errorf("%w: %d of %d rollouts failed (%.0f%%, over run.max_error_rate %g)%s; the finished groups are committed, and a rerun redoes the failed ones",
		ErrErrorRate, errs, done, 100*float64(errs)/float64(done), limit, r.stats.TopErrors())
	if !final {
		r.fail(err)
	}
	return err
}
