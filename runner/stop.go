package runner

import (
	"errors"
	"fmt"

	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/runner/stop"
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
	ErrAborted = stop.ErrAborted
	// ErrGraceExceeded: a stop took longer than run.grace: what was not
	// committed by then is dropped.
	ErrGraceExceeded = stop.ErrGraceExceeded
)

// errorRateMin is the number of resolved rollouts from which
// run.max_error_rate is checked while the run goes; the end of a run checks
// it whatever the number.
const errorRateMin = 100

// stop begins the run's graceful stop for cause (runner/stop: the first
// cause wins): no more groups are admitted, and what is in flight is
// cancelled, or with drain may finish until the grace period's commit
// reserve.
func (r *run) stop(cause error, drain bool) {
	r.stopper.Stop(cause, drain, stop.Plan{
		Grace: r.cfg.Run.Grace.D(), Stderr: r.opts.Stderr, CancelInFlight: r.cancelInFlight,
		Admission: func() {
			if r.flow.ctl != nil {
				r.flow.ctl.Stop()
			}
		},
	})
}

// interrupted begins the stop of a cancelled run (run.on_signal).
func (r *run) interrupted(cause error) {
	r.stop(fmt.Errorf("%w (%v)", ErrInterrupted, cause), r.cfg.Run.OnSignal == "drain")
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
