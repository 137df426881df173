package serve

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// stalePolicy is the policy the ledger consults on staleness when a step
// is made (serve.max_staleness, serve.on_stale): which queued groups are
// too stale to serve, the groups set aside (recorded in the state, or to
// be with its next record), their tasks sampled again, the staleness
// gate told of the places they free, and the stale guard. The ledger's
// lock guards it.
type stalePolicy struct {
	// bound is serve.max_staleness's (nil: none) and dropStale whether
	// serve.on_stale drops a group too stale to serve (requeue, drop)
	// rather than keeping it: a queued group whose oldest token is more
	// than max_staleness versions behind the policy is then never served.
	bound     *groups.Bound
	dropStale bool
	// discard, when set, tells the staleness gate that n groups it
	// counted as accepted will never be consumed (found stale in the
	// queue): their places are free again.
	discard func(n int)
	// unserved, under serve.on_stale requeue, holds the run's tasks of
	// the groups not handed out: a group found stale has its task
	// sampled again once the state records it stale; nil otherwise.
	unserved *groups.Unserved
	// stale are the groups found too stale to serve (recorded in the
	// state's Stale, or to be with its next record: unrecorded, the
	// newest of them); never served, never queued again.
	stale      map[groupRef]bool
	unrecorded []groupRef
	// watch is the guard on the share of kept groups set aside as stale
	// among the latest decided.
	watch *staleWatch
}

// newStalePolicy returns the policy of serve.max_staleness (nil: none),
// serve.on_stale and the run's Unserved, with a stale guard over window
// groups, over the groups the state recorded stale.
func newStalePolicy(bound *groups.Bound, onStale string, unserved *groups.Unserved, window int, recorded []groupRef) stalePolicy {
	p := stalePolicy{bound: bound, stale: map[groupRef]bool{}, watch: newStaleWatch(max(window, staleWindow(0)))}
	if bound != nil {
		p.dropStale = onStale != groups.StaleKeep
	}
	for _, g := range recorded {
		p.stale[g] = true
	}
	if p.dropStale && onStale != groups.StaleDrop {
		p.unserved = unserved
	}
	return p
}

// tooStale reports whether a queued group's oldest token is more than
// serve.max_staleness versions behind policy: served now, a trainer at
// that version would train on it past the bound.
func (p *stalePolicy) tooStale(g *group, policy int64) bool {
	return p.bound != nil && len(g.versions) > 0 && p.bound.Stale(g.versions[0], policy)
}

// maxStale is serve.max_staleness, -1 without a bound (for the stale
// guard's report).
func (p *stalePolicy) maxStale() int64 {
	if p.bound == nil {
		return -1
	}
	return int64(p.bound.MaxStaleness)
}

// setAside takes the groups of queue too stale to serve at policy out of
// it and out of queued (under serve.on_stale requeue or drop), releases
// them and returns the queue left: they are unrecorded until the state
// records them, and the staleness gate gets their places back.
func (p *stalePolicy) setAside(queue []*group, queued map[groupRef]*group, policy int64) []*group {
	if !p.dropStale {
		return queue
	}
	n := 0
	kept := queue[:0]
	for _, g := range queue {
		if !p.tooStale(g, policy) {
			kept = append(kept, g)
			continue
		}
		delete(queued, g.ref)
		p.stale[g.ref] = true
		p.watch.add(true, g.versions[0])
		p.unrecorded = append(p.unrecorded, g.ref)
		g.release()
		n++
	}
	clear(queue[len(kept):])
	if n > 0 && p.discard != nil {
		p.discard(n)
	}
	return kept
}

// requeue has the tasks of groups recorded stale sampled again (under
// serve.on_stale requeue).
func (p *stalePolicy) requeue(refs []groupRef) {
	if p.unserved != nil && len(refs) > 0 {
		p.unserved.Requeue(keysOf(refs)...)
	}
}

// keysOf is refs as the run's group keys.
func keysOf(refs []groupRef) []pipeline.GroupKey {
	keys := make([]pipeline.GroupKey, len(refs))
	for i, r := range refs {
		keys[i] = r.key()
	}
	return keys
}

// dropStaleGroups takes the queued groups too stale to serve out of the
// queue (stalePolicy.setAside): the state records them with its next
// change (recordStale, at the service's next tick, at the latest), under
// requeue their tasks are then sampled again. Versions only grow, so a
// group found stale stays stale: one a crash leaves unrecorded is found
// stale again after the restart, and none is ever served. l.mu is held.
func (l *ledger) dropStaleGroups() {
	l.queue = l.sp.setAside(l.queue, l.queued, l.st.Policy)
}

// recordStale records the groups found stale since the last record, when
// there are any, without another change: their tasks are then sampled
// again (serve.on_stale requeue) without waiting for the next step,
// policy version or pause.
func (l *ledger) recordStale() error {
	err := l.record(func() (*state, error) {
		if len(l.sp.unrecorded) == 0 {
			return nil, nil
		}
		return l.st.clone(), nil
	}, func(*state) {})
	if err != nil {
		return fmt.Errorf("recording the groups found stale: %w", err)
	}
	return nil
}

// takeOldest takes k groups out of the queue (k <= its length), oldest
// first: by their oldest token's policy version, in queue order within a
// version. The staleness bound (AReaL's capacity rule) holds when the
// groups are consumed in the order they were admitted; the queue is in
// the order they finished, and a slow group admitted early finishes
// late: served after younger ones, it would age past the bound. l.mu is
// held.
func (l *ledger) takeOldest(k int) []*group {
	order := slices.Clone(l.queue)
	slices.SortStableFunc(order, func(a, b *group) int {
		return cmp.Compare(a.versions[0], b.versions[0])
	})
	fresh := order[:k]
	taken := make(map[groupRef]bool, k)
	for _, g := range fresh {
		taken[g.ref] = true
		l.sp.watch.add(false, 0)
	}
	l.queue = slices.DeleteFunc(l.queue, func(g *group) bool { return taken[g.ref] })
	return fresh
}

// staleCheck turns the stale guard's alarm on or off as its window says
// and returns the line to log when it changed ("" otherwise).
func (l *ledger) staleCheck() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sp.watch.check(l.now(), l.st.Policy, l.sp.maxStale())
}

// setDiscard sets the function told of the groups found stale in the
// queue (the staleness gate's Discard).
func (l *ledger) setDiscard(fn func(n int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sp.discard = fn
}
