package generate

import (
	"context"
	"fmt"
	"sync"
)

// PauseMode is what a pause does to the requests in flight on an endpoint.
type PauseMode string

const (
	// PauseAbort aborts the requests in flight; each is continued after
	// the resume from the tokens it already has (token-in-token-out), so a
	// rollout may hold tokens of two policy versions.
	PauseAbort PauseMode = "abort"
	// PauseKeep leaves the requests in flight to the server, which
	// finishes them under the new weights.
	PauseKeep PauseMode = "keep"
)

// Policy is the version of the weights the fleet serves and the pause that
// brackets a weight update. A run without one generates under version 0
// and is never paused. It is safe for concurrent use.
type Policy struct {
	mu      sync.Mutex
	version int64
	paused  bool
	mode    PauseMode
	// resumed is closed by Resume (and replaced by Pause): Wait blocks on
	// it while the fleet is paused.
	resumed chan struct{}
	// changed is closed and replaced on every change of version or pause.
	changed chan struct{}
}

// NewPolicy returns a policy at version v, not paused.
func NewPolicy(v int64) *Policy {
	done := make(chan struct{})
	close(done)
	return &Policy{version: v, resumed: done, changed: make(chan struct{})}
}

// Version is the current policy version.
func (p *Policy) Version() int64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// SetVersion makes v the current version. Versions only grow: a v below
// the current one is an error (an equal one is a no-op, so a repeated call
// is harmless).
func (p *Policy) SetVersion(v int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v < p.version {
		return fmt.Errorf("policy version %d is below the current version %d", v, p.version)
	}
	if v != p.version {
		p.version = v
		p.notify()
	}
	return nil
}

// Pause stops new generation until Resume. mode is what becomes of the
// requests in flight. Pausing a paused policy changes only its mode.
func (p *Policy) Pause(mode PauseMode) error {
	if mode != PauseAbort && mode != PauseKeep {
		return fmt.Errorf("pause mode %q: want %q or %q", mode, PauseAbort, PauseKeep)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resumed = make(chan struct{})
	}
	p.mode = mode
	p.notify()
	return nil
}

// Resume ends a pause; a no-op when not paused.
func (p *Policy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return
	}
	p.paused = false
	close(p.resumed)
	p.notify()
}

// Paused reports whether the fleet is paused, and in which mode.
func (p *Policy) Paused() (bool, PauseMode) {
	if p == nil {
		return false, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.mode
}

// Wait blocks while the fleet is paused; it returns ctx's error when ctx
// ends first. A nil policy never waits.
func (p *Policy) Wait(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Changed returns a channel closed at the next change of version or
// pause: a caller that watches the policy selects on it, then calls
// Changed again.
func (p *Policy) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// notify wakes the watchers; p.mu is held.
func (p *Policy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}
