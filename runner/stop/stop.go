// Package stop is a run's graceful stop. A stop (the run's context
// cancelled, or a fatal error) ends admission at once: the source hands
// out no more groups. What is in flight is cancelled (run.on_signal:
// cancel, and every fatal error) or may finish (drain) until grace minus
// a commit reserve; groups already resolved flow on to collate and the
// sinks, which close normally and commit. If the stop has not ended after
// run.grace, or the caller aborts, the hard context is cancelled:
// uncommitted work is dropped.
package stop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

var (
	// ErrAborted: the caller aborted (a second signal): the run stopped
	// at once; what was not committed yet is dropped.
	ErrAborted = errors.New("aborted")
	// ErrGraceExceeded: a stop took longer than run.grace: what was not
	// committed by then is dropped.
	ErrGraceExceeded = errors.New("the stop took longer than run.grace")
)

// Stopper is one run's stop.
type Stopper struct {
	once   sync.Once
	began  chan struct{} // closed when the stop begins
	mu     sync.Mutex
	cause  error
	timers []*time.Timer
	// hard is the graph's context; cancelling it drops uncommitted work.
	hard       context.Context
	cancelHard context.CancelCauseFunc
}

// New is the stop of a run under parent: its hard context outlives
// parent's cancel, which only begins the stop (Watch).
func New(parent context.Context) *Stopper {
	hard, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &Stopper{began: make(chan struct{}), hard: hard, cancelHard: cancel}
}

// Hard is the graph's context: cancelled when the stop overran its grace
// or was aborted (context.Cause says which).
func (s *Stopper) Hard() context.Context { return s.hard }

// Began is closed when the stop begins.
func (s *Stopper) Began() <-chan struct{} { return s.began }

// Stopping reports whether a stop began.
func (s *Stopper) Stopping() bool {
	select {
	case <-s.began:
		return true
	default:
		return false
	}
}

// Err is why the run stopped, nil when it did not.
func (s *Stopper) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// Release stops the timers and frees the hard context.
func (s *Stopper) Release() {
	s.mu.Lock()
	for _, t := range s.timers {
		t.Stop()
	}
	s.mu.Unlock()
	s.cancelHard(context.Canceled)
}

// Plan is how a stop goes: its grace, and what it calls.
type Plan struct {
	Grace time.Duration
	// Stderr hears that the stop began.
	Stderr io.Writer
	// Admission ends admission (groups.Controller.Stop); CancelInFlight
	// cancels every rollout in flight and still to come.
	Admission, CancelInFlight func()
}

// Stop begins the stop for cause (the first cause wins): no more groups
// are admitted, and what is in flight is cancelled, or with drain may
// finish until the grace period's commit reserve.
func (s *Stopper) Stop(cause error, drain bool, p Plan) {
	s.once.Do(func() {
		s.mu.Lock()
		s.cause = cause
		if drain {
			reserve := min(5*time.Second, p.Grace/4)
			s.timers = append(s.timers, time.AfterFunc(p.Grace-reserve, p.CancelInFlight))
		}
		s.timers = append(s.timers, time.AfterFunc(p.Grace, func() { s.cancelHard(ErrGraceExceeded) }))
		s.mu.Unlock()
		close(s.began)
		fmt.Fprintf(p.Stderr, "trajflow: stopping: %v; committing finished groups (within run.grace, %s)\n", cause, p.Grace)
		p.Admission()
		if !drain {
			p.CancelInFlight()
		}
	})
}

// Watch calls interrupted when ctx is cancelled and aborts (the hard
// context cancelled with ErrAborted) when abort closes, until done
// closes.
func (s *Stopper) Watch(ctx context.Context, abort, done <-chan struct{}, interrupted func(cause error)) {
	select {
	case <-ctx.Done():
		interrupted(context.Cause(ctx))
	case <-abort:
	case <-done:
		return
	}
	select {
	case <-abort:
		s.cancelHard(ErrAborted)
	case <-done:
	}
}
