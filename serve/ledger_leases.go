package serve

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// expire removes the leases past their expiry, counting them: the one
// place a lease ends other than an ack. l.mu is held.
func (l *ledger) expire() {
	now := l.now()
	for n, exp := range l.leases {
		if !now.Before(exp) {
			delete(l.leases, n)
			l.counts.expired++
		}
	}
}

// wholeRank is the slot of a whole-step caller holding a step made for
// the ranks of a world (a stranded one): the slices not acknowledged.
const wholeRank = -1

// setLease leases a slot until a time; l.mu is held.
func (l *ledger) setLease(s slot, until time.Time) {
	l.leases[s] = until
	if until.After(l.lastExpiry[s.step]) {
		l.lastExpiry[s.step] = until
	}
}

// leasedAny reports whether any slot of step n is leased; l.mu is held.
func (l *ledger) leasedAny(n int64) bool {
	for s := range l.leases {
		if s.step == n {
			return true
		}
	}
	return false
}

// stranded reports whether st, not acknowledged, has had no lease for a
// whole serve.lease since its last one ran out: no caller of its kind
// (a whole-step caller, or the ranks of its world) took it back, so one
// of another kind may take it, and no step waits for a kind of caller
// that is gone (a job restarted with another world, or without ranks).
// l.mu is held, after expire.
func (l *ledger) stranded(st *stepState) bool {
	return !st.Acked && !l.leasedAny(st.Step) && !l.now().Before(l.lastExpiry[st.Step].Add(l.lease))
}

// pendingStep is the oldest step a waiter is to be served before any new
// one. Served whole (world 0): a step neither acknowledged nor leased,
// served before, to be served again, whole and under its number, whatever
// K the waiter asks (its answer says its size), so that no step waits for
// a trainer of its size that may never come back. To rank r of world W:
// a step made for world W whose slice r is neither acknowledged nor
// leased (a step another rank took first, or a slice whose lease ran
// out). Either caller also takes a step of the other kind that is
// stranded: a whole-step caller the slices of a world's step that no rank
// acknowledged, a rank a whole step (or a step of another world),
// cut anew for its world; of a world's step some ranks acknowledged,
// only the groups of the slices not acknowledged (remainder), at least
// one for each rank. l.mu is held, after expire.
func (l *ledger) pendingStep(w *waiter) *stepState {
	for _, st := range l.st.Steps {
		if st.Acked {
			continue
		}
		world := st.World
		if cw, ok := l.converting[st.Step]; ok {
			world = cw
		}
		if world == w.world {
			switch {
			case w.world == 0 && l.leasedAny(st.Step):
			case w.world > 0 && (slices.Contains(st.RanksAcked, w.rank) || l.isLeased(slot{st.Step, w.rank}) || l.isLeased(slot{st.Step, wholeRank})):
			default:
				return st
			}
			continue
		}
		if _, ok := l.converting[st.Step]; ok || !l.stranded(st) {
			continue
		}
		if !cuttable(st) {
			// A step recorded without its groups' tokens: whole alone.
			if w.world == 0 && len(st.RanksAcked) == 0 {
				return st
			}
			continue
		}
		if len(remainder(st)) >= w.world {
			return st
		}
	}
	return nil
}

// cuttable reports whether st records its groups' tokens and rows, which
// its slices, and its remainder, are cut by.
func cuttable(st *stepState) bool {
	return len(st.GroupTokens) == len(st.Groups) && len(st.GroupRows) == len(st.Groups)
}

// remainder is the indices, in step order, of st's groups that are in no
// slice its ranks acknowledged: all of them for a step served whole or
// none of whose slices was acknowledged. st is cuttable.
func remainder(st *stepState) []int {
	var out []int
	if st.World == 0 || len(st.RanksAcked) == 0 {
		for i := range st.Groups {
			out = append(out, i)
		}
		return out
	}
	for rank, slice := range partition(st.GroupTokens, st.World) {
		if !slices.Contains(st.RanksAcked, rank) {
			out = append(out, slice...)
		}
	}
	slices.Sort(out)
	return out
}

// narrowed is st, not acknowledged, less the groups of the slices its
// ranks acknowledged: those are added to Trained, never served again,
// and the step is the remainder's groups (remainder), with no rank's
// ack, to be cut for another world or served whole. A step none of whose
// slices was acknowledged is returned as it is (a copy). st is cuttable.
func narrowed(st *stepState) stepState {
	c := *st
	if len(st.RanksAcked) == 0 {
		return c
	}
	rest := remainder(st)
	keep := make(map[int]bool, len(rest))
	c.Groups, c.GroupTokens, c.GroupRows, c.Rows = nil, nil, nil, 0
	for _, i := range rest {
		keep[i] = true
		c.Groups = append(c.Groups, st.Groups[i])
		c.GroupTokens = append(c.GroupTokens, st.GroupTokens[i])
		c.GroupRows = append(c.GroupRows, st.GroupRows[i])
		c.Rows += st.GroupRows[i]
	}
	c.Trained = slices.Clone(st.Trained)
	for i, g := range st.Groups {
		if !keep[i] {
			c.Trained = append(c.Trained, g)
		}
	}
	c.RanksAcked, c.RankLeases = nil, nil
	return c
}

// isLeased reports whether a slot is leased; l.mu is held.
func (l *ledger) isLeased(s slot) bool {
	_, ok := l.leases[s]
	return ok
}

// recordLease records the lease a dispatch gave on a step made before (a
// step served again, a rank's slice of a step another rank made, a
// stranded step taken by a caller of another kind: g), in the state
// file before it is answered: a restart keeps it as it keeps a new
// step's, so the trainer holding it acknowledges it rather than another
// caller getting it too. A stranded step taken by a rank of a world
// other than its own is recorded cut for that world (its slices by
// tokens), and the world's other ranks then take their slices of it; a
// stranded step of a world some ranks acknowledged is recorded narrowed
// to its remainder first (narrowed), cut for the new world or, taken by
// a whole-step caller, made a whole step. It returns the step as
// recorded, to answer from. Nothing is recorded when
// the step was acknowledged or the lease taken back meanwhile. On an
// error the caller gives the grant back (unlease).
func (l *ledger) recordLease(g grant, world int) (*stepState, error) {
	n := g.step.Step
	leased := g.step
	converted := false
	err := l.record(func() (*state, error) {
		st := l.steps[n]
		until, ok := l.leases[slot{n, g.rank}]
		if st == nil || st.Acked || !ok {
			delete(l.converting, n)
			if st != nil {
				leased = st
			}
			return nil, nil
		}
		c := *st
		switch {
		case st.World == 0 && world == 0:
			c.LeasedUntil, c.LeasedRank = until.UTC(), 0
		case world > 0 && st.World != world:
			// Cut anew for this world: its remainder, when some ranks
			// of its world acknowledged their slices.
			c = narrowed(st)
			c.World, c.RanksAcked, c.LeasedUntil, c.LeasedRank = world, nil, time.Time{}, 0
			c.RankLeases = map[int]time.Time{g.rank: until.UTC()}
			converted = true
		case world == 0 && len(st.RanksAcked) > 0:
			// Its remainder, served whole to this caller.
			c = narrowed(st)
			c.World, c.LeasedUntil, c.LeasedRank = 0, until.UTC(), 0
		default:
			c.RankLeases = maps.Clone(st.RankLeases)
			if c.RankLeases == nil {
				c.RankLeases = map[int]time.Time{}
			}
			c.RankLeases[g.rank] = until.UTC()
		}
		leased = &c
		next := l.st.clone()
		for i, s := range next.Steps {
			if s.Step == n {
				next.Steps[i] = leased
			}
		}
		return next, nil
	}, func(*state) {
		// An ack meanwhile is recorded after this (records are
		// serialised): it sees and keeps this lease's state.
		l.steps[n] = leased
		delete(l.converting, n)
		if converted {
			// The world's other ranks waiting take their slices now.
			l.dispatch()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("recording the lease of step %d: %w", n, err)
	}
	return leased, nil
}

// unlease gives back a grant of a step whose lease could not be
// recorded: it is to be served again.
func (l *ledger) unlease(g grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.giveBack(g)
	l.dispatch()
}

// ack completes step n: acknowledged once and for all (a repeated ack is
// a no-op), recorded before it returns. With a world (> 0) it
// acknowledges rank's slice of a step served to that world, and the step
// is complete once every rank's is; world 0 acknowledges the whole step.
// A rank's ack of a stranded step being cut anew for another world
// (converting) is errWorld, as once it is cut: its remainder is fixed.
// drift, when not nil, is recorded with the ack (merged with the ranks'
// before); a repeated ack records nothing.
func (l *ledger) ack(n int64, rank, world int, drift *client.StepDriftRecord) (*stepState, error) {
	var acked *stepState
	err := l.record(func() (*state, error) {
		st := l.steps[n]
		if st == nil {
			return nil, fmt.Errorf("step %d %w", n, errNeverServed)
		}
		acked = st
		if world > 0 && st.World != world {
			return nil, fmt.Errorf("step %d was served to a world of %d ranks (0: whole), not %d: %w", n, st.World, world, errWorld)
		}
		if cw, ok := l.converting[n]; ok && world > 0 {
			// Stranded, it is being cut anew for another world from
			// the slices acknowledged until now.
			return nil, fmt.Errorf("step %d is being cut anew for a world of %d ranks, not %d: %w", n, cw, world, errWorld)
		}
		if st.Acked || world > 0 && slices.Contains(st.RanksAcked, rank) {
			return nil, nil
		}
		done := *st
		if drift != nil {
			merged := &client.StepDriftRecord{Trainer: drift.Trainer, Ratio: drift.Ratio, ByLag: map[string]*client.DriftSums{}}
			if st.Drift != nil {
				merged.Trainer = st.Drift.Trainer
				merged.Merge(st.Drift)
			}
			merged.Merge(drift)
			done.Drift = merged
		}
		if world > 0 {
			done.RanksAcked = append(slices.Clone(st.RanksAcked), rank)
			slices.Sort(done.RanksAcked)
			done.Acked = len(done.RanksAcked) == world
		} else {
			done.Acked = true
		}
		acked = &done
		next := l.st.clone()
		for i, s := range next.Steps {
			if s.Step == n {
				next.Steps[i] = &done
			}
		}
		return next, nil
	}, func(*state) {
		l.steps[n] = acked
		delete(l.leases, slot{n, rank})
		if acked.Acked {
			for s := range l.leases {
				if s.step == n {
					delete(l.leases, s)
				}
			}
			l.counts.acked++
		}
	})
	if errors.Is(err, errNotRecorded) {
		err = fmt.Errorf("recording the ack of step %d: %w", n, err)
	}
	return acked, err
}
