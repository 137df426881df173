package groups

import (
	"context"
	"fmt"
	"sync"

	"github.com/trajflow/trajflow/pipeline"
)

// ReasonStale is the filter reason of a kept group that a Staleness gate
// found too stale to use (on_stale: drop or requeue).
const ReasonStale = "stale"

// What becomes of a group too stale to use (StalenessOptions.OnStale).
const (
	// StaleRequeue drops the group and samples its task again (a new
	// attempt): the prompt goes back to the queue. The default.
	StaleRequeue = "requeue"
	// StaleDrop drops the group (filter_reason stale) for good.
	StaleDrop = "drop"
	// StaleKeep keeps it, counted.
	StaleKeep = "keep"
)

// Versions is the fleet's policy version, as generate.Policy gives it:
// the version now, and a channel closed at its next change.
type Versions interface {
	Version() int64
	Changed() <-chan struct{}
}

// Bound is max_staleness's one carrier, from the config
// (config.ServeConfig.Staleness: serve.max_staleness and step_groups) to
// the gate (StalenessOptions) and serve's ledger, with its rules written
// once: Validate, the capacity formula (Groups) and the test of a stale
// group (Stale).
type Bound struct {
	// MaxStaleness is s: a group admitted at version a can still be used
	// by a trainer at version v while v - a <= s.
	MaxStaleness int
	// StepGroups is B, the groups a trainer consumes per version (its
	// step's groups, K).
	StepGroups int
}

// Validate checks the bound, naming serve's keys.
func (b Bound) Validate() error {
	var p pipeline.Problems
	if b.MaxStaleness < 0 {
		p.Add("max_staleness", "must be >= 0, got %d", b.MaxStaleness)
	}
	if b.StepGroups < 1 {
		p.Add("step_groups", "required with max_staleness: the groups a trainer takes per policy version")
	}
	return p.Err()
}

// Groups is the kept groups the bound lets a run accept in all at policy
// version v: (v + s + 1) × B, a version below 0 counting as 0. The one
// formula of the bound: the gate's capacity and serve's demand both take
// it from here.
func (b Bound) Groups(v int64) int {
	return int((max(v, 0) + int64(b.MaxStaleness) + 1) * int64(b.StepGroups))
}

// Stale reports whether tokens of version oldest can no longer be used by
// a trainer at version policy: policy - oldest > s.
func (b Bound) Stale(oldest, policy int64) bool {
	return policy-oldest > int64(b.MaxStaleness)
}

// StalenessOptions configure a Staleness gate.
type StalenessOptions struct {
	// Bound is max_staleness and the groups a trainer consumes per
	// version.
	Bound Bound
	// OnStale is what becomes of a finished kept group that is stale
	// anyway (StaleRequeue, StaleDrop, StaleKeep; "": requeue).
	OnStale string
	// Accepted is the groups accepted before this gate (a resumed
	// service's count), which the capacity counts as consumed.
	Accepted int
}

// Validate checks the options, naming the field.
func (o StalenessOptions) Validate() error {
	if err := o.Bound.Validate(); err != nil {
		return err
	}
	if o.Accepted < 0 {
		return fmt.Errorf("accepted: %d is negative", o.Accepted)
	}
	switch o.OnStale {
	case "", StaleRequeue, StaleDrop, StaleKeep:
	default:
		return fmt.Errorf("on_stale: %q is not one of requeue, drop, keep", o.OnStale)
	}
	return nil
}

// Staleness is the capacity-based admission gate of an asynchronous
// trainer (AReaL's): a new group is admitted only while every group
// accepted or running can still be used within MaxStaleness versions. A
// trainer at version v has consumed at most v×B groups (B = Bound.StepGroups) and
// will use the groups accepted so far in order, so a group admitted now is
// used within s versions when the groups accepted or running number at
// most (v + s + 1)×B:
//
//	capacity = (v + s + 1)×B − (accepted + running)
//
// Groups the keep rule drops free their place (they are never consumed).
// The gate paces generation rather than wasting it: groups rarely become
// stale; those that do anyway (a slow group, a trainer that skips ahead)
// are handled by OnStale and counted. It is safe for concurrent use.
type Staleness struct {
	opts StalenessOptions
	ver  Versions

	mu sync.Mutex
	// freed is closed and replaced when a group is done (its place may
	// be free): Admit waits on it and on the version.
	freed    chan struct{}
	running  int
	accepted int
	requeued int
	dropped  int
	keptOld  int
}

// NewStaleness returns the gate of opts over the versions ver.
func NewStaleness(opts StalenessOptions, ver Versions) (*Staleness, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if ver == nil {
		return nil, fmt.Errorf("staleness gate: no policy versions")
	}
	if opts.OnStale == "" {
		opts.OnStale = StaleRequeue
	}
	return &Staleness{opts: opts, ver: ver, accepted: opts.Accepted, freed: make(chan struct{})}, nil
}

// capacity is the groups that may be admitted now; s.mu is held.
func (s *Staleness) capacity(v int64) int {
	return s.opts.Bound.Groups(v) - s.accepted - s.running
}

// Admit blocks until a group may be admitted, counts it running and
// returns the version it is admitted at. It returns ctx's error when ctx
// ends first.
func (s *Staleness) Admit(ctx context.Context) (int64, error) {
	for {
		ch := s.ver.Changed()
		v := s.ver.Version()
		s.mu.Lock()
		if s.capacity(v) > 0 {
			s.running++
			s.mu.Unlock()
			return v, nil
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Done ends a group admitted: accepted (kept, to be consumed) or not (the
// keep rule dropped it, it failed, it was abandoned).
func (s *Staleness) Done(accepted bool) {
	s.mu.Lock()
	s.running--
	if accepted {
		s.accepted++
	}
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}

// Discard gives back the places of n groups accepted that will never be
// consumed (a service found them too stale to hand out): the capacity
// counts them no more, as it counts no group the keep rule dropped.
// They are counted as OnStale says: in Requeued under requeue (the
// service has their tasks sampled again), else in Dropped.
func (s *Staleness) Discard(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.accepted = max(s.accepted-n, 0)
	if s.opts.OnStale == StaleRequeue {
		s.requeued += n
	} else {
		s.dropped += n
	}
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}

// OnStale is what becomes of a group too stale to use (StaleRequeue,
// StaleDrop, StaleKeep).
func (s *Staleness) OnStale() string { return s.opts.OnStale }

// Stale reports whether g, judged by the oldest version of its own
// tokens (pipeline.Rollout.MinPolicyVersion: the version the oldest
// answer was requested under, not the one its rollout was admitted at,
// which a pause may have left behind), can no longer be used within
// MaxStaleness versions of the version now.
func (s *Staleness) Stale(g *pipeline.Group) bool {
	if len(g.Rollouts) == 0 {
		return false
	}
	a := g.Rollouts[0].MinPolicyVersion()
	for _, r := range g.Rollouts[1:] {
		a = min(a, r.MinPolicyVersion())
	}
	return s.opts.Bound.Stale(a, s.ver.Version())
}

// Apply handles a finished group after its keep rule: a kept group that
// is stale is kept (on_stale: keep) or dropped with filter reason stale
// (drop, requeue); requeue is true when its task is to be sampled again.
// Each is counted.
func (s *Staleness) Apply(g *pipeline.Group) (requeue bool) {
	if !g.Kept || !s.Stale(g) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.opts.OnStale {
	case StaleKeep:
		s.keptOld++
		return false
	case StaleDrop:
		s.dropped++
	default:
		s.requeued++
		requeue = true
	}
	g.Kept, g.FilterReason = false, ReasonStale
	for _, r := range g.Rollouts {
		r.Kept, r.FilterReason = false, ReasonStale
		if r.Status == pipeline.StatusOK {
			r.Status = pipeline.StatusFiltered
		}
	}
	return requeue
}

// StalenessStats are a Staleness gate's counters.
type StalenessStats struct {
	// Version is the policy version now; Capacity the groups that may be
	// admitted at it.
	Version  int64
	Capacity int
	// Running are the groups admitted and not done; Accepted the groups
	// accepted, Accepted in the options included.
	Running, Accepted int
	// Requeued, Dropped and KeptStale count the stale groups by what
	// became of them.
	Requeued, Dropped, KeptStale int
}

// Stats returns the gate's counters.
func (s *Staleness) Stats() StalenessStats {
	v := s.ver.Version()
	s.mu.Lock()
	defer s.mu.Unlock()
	return StalenessStats{Version: v, Capacity: max(s.capacity(v), 0), Running: s.running, Accepted: s.accepted,
		Requeued: s.requeued, Dropped: s.dropped, KeptStale: s.keptOld}
}

// Requeue hands j out again: the source's next group (a stale group's
// task, in a new attempt). Its group counts as in flight until its
// GroupDone.
func (c *Controller) Requeue(j Job) {
	c.mu.Lock()
	c.again = append(c.again, j)
	c.mu.Unlock()
	c.signal()
}

// AdmitUntil waits for the gate to admit a group (Admit), until ctx ends
// or stop closes (the run's stop began): then it reports false. A nil
// gate admits at once.
func (s *Staleness) AdmitUntil(ctx context.Context, stop <-chan struct{}) bool {
	if s == nil {
		return true
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-actx.Done():
		}
	}()
	_, err := s.Admit(actx)
	return err == nil
}

// Finish ends a finished group's place in the gate after its keep rule,
// and applies on_stale to it; requeue is true when its task is to be
// sampled again. A nil gate does nothing.
func (s *Staleness) Finish(g *pipeline.Group) (requeue bool) {
	if s == nil {
		return false
	}
	requeue = s.Apply(g)
	s.Done(g.Kept)
	return requeue
}

// Abandon ends the place of a group admitted that will not finish (its
// row was rejected, a stop cut it off). A nil gate does nothing.
func (s *Staleness) Abandon() {
	if s != nil {
		s.Done(false)
	}
}
