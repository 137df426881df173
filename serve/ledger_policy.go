package serve

import (
	"errors"
	"fmt"
	"time"

	"github.com/trajflow/trajflow/stages/generate"
)

// versionBelowError is a policy version below the current one: it says
// what the current version is and what a trainer is to do about it.
type versionBelowError struct {
	version, current int64
}

func (e *versionBelowError) Error() string {
	return fmt.Sprintf("policy version %d is below the current version %d: %v. "+
		"A trainer restarted from an older checkpoint reads policy_version from GET /v1/status first, "+
		"then loads weights of version %d or later (or posts %d, a no-op, to go on with the fleet's weights) "+
		"and, if it paused, resumes (POST /v1/resume)", e.version, e.current, errVersionBelow, e.current, e.current)
}

func (e *versionBelowError) Unwrap() error { return errVersionBelow }

// setVersion makes v the policy version: recorded, then given to the
// fleet. A v below the current one is errVersionBelow; an equal one is a
// no-op.
func (l *ledger) setVersion(v int64) error {
	err := l.record(func() (*state, error) {
		if v < l.st.Policy {
			return nil, &versionBelowError{version: v, current: l.st.Policy}
		}
		if v == l.st.Policy {
			return nil, nil
		}
		next := l.st.clone()
		next.Policy = v
		return next, nil
	}, func(next *state) {
		// Never below: versions only grow in the state too.
		_ = l.policy.SetVersion(next.Policy)
		// A new version lets the staleness bound admit more.
		l.setDemand()
	})
	if errors.Is(err, errNotRecorded) {
		err = fmt.Errorf("recording policy version %d: %w", v, err)
	}
	return err
}

// pause pauses the fleet in mode once the state records it, with when
// and by whom: a restarted service comes back paused. A pause while paused
// records its mode, time and by anew (the latest pause is the one
// serve.pause_timeout counts from).
func (l *ledger) pause(mode generate.PauseMode, by string) error {
	if mode != generate.PauseAbort && mode != generate.PauseKeep {
		return fmt.Errorf("pause mode %q: %w", mode, errPauseMode)
	}
	err := l.record(func() (*state, error) {
		next := l.st.clone()
		next.Paused, next.PausedAt, next.PausedBy = string(mode), l.now().UTC(), by
		return next, nil
	}, func(*state) {
		// The mode was checked above.
		_ = l.policy.Pause(mode)
	})
	if err != nil {
		return fmt.Errorf("recording the pause (%s): %w; a restart would not know it", mode, err)
	}
	return nil
}

// resume lets the fleet go on once the state records it.
func (l *ledger) resume() error {
	err := l.record(func() (*state, error) {
		if l.st.Paused == "" {
			return nil, nil
		}
		return unpaused(l.st), nil
	}, func(*state) { l.policy.Resume() })
	if err != nil {
		return fmt.Errorf("recording the resume: %w; a restart would not know it", err)
	}
	return nil
}

// unpaused is st without its pause.
func unpaused(st *state) *state {
	next := st.clone()
	next.Paused, next.PausedAt, next.PausedBy = "", time.Time{}, ""
	return next
}

// pauseInfo is a pause: its mode, since when and by whom.
type pauseInfo struct {
	Mode  string
	Since time.Time
	By    string
}

// expirePause ends a pause recorded serve.pause_timeout ago or longer
// (its trainer never resumed), once the state records the resume, and
// returns it; nil when there is none to end.
func (l *ledger) expirePause() (*pauseInfo, error) {
	var ended *pauseInfo
	err := l.record(func() (*state, error) {
		st := l.st
		if l.pauseTimeout <= 0 || st.Paused == "" || l.now().Sub(st.PausedAt) < l.pauseTimeout {
			return nil, nil
		}
		ended = &pauseInfo{Mode: st.Paused, Since: st.PausedAt, By: st.PausedBy}
		return unpaused(st), nil
	}, func(*state) { l.policy.Resume() })
	if err != nil {
		return nil, fmt.Errorf("recording the end of a pause past serve.pause_timeout: %w", err)
	}
	return ended, nil
}

// stepOf is step n as recorded (nil: never made).
func (l *ledger) stepOf(n int64) *stepState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.steps[n]
}

// version is the policy version the ledger recorded and published.
func (l *ledger) version() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Policy
}
