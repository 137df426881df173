package serve

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// The ledger's errors, matched with errors.Is (the HTTP status of each is
// chosen by statusOf).
var (
	// errNeverServed: an ack of a step that was never served (404).
	errNeverServed = errors.New("was never served")
	// errVersionBelow: a policy version below the current one (409); the
	// error is a *versionBelowError, which names the current version.
	errVersionBelow = errors.New("policy versions only grow")
	// errPauseMode: a pause mode other than abort and keep (400).
	errPauseMode = errors.New("want abort or keep")
	// errEnded: no more kept groups come and the request cannot be
	// served (503).
	errEnded = errors.New("no more kept groups will come")
	// errStopping: the service is stopping (503).
	errStopping = errors.New("the service is stopping")
	// errNotRecorded: a change the state file could not record (500);
	// nothing of it was published.
	errNotRecorded = errors.New("not recorded")
	// errWorld: an ack's world that is not the one its step was served
	// to (400).
	errWorld = errors.New("not the step's world")
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

// ledger is the service's state machine: the steps made and their leases,
// the queue of kept groups in no step, the trainers waiting for a step,
// the policy version and the pause.
//
// It decides under its lock, persists outside it and publishes under it:
// a change that the state file records (a step, an ack, a policy version,
// a pause) is decided on a copy of the state, written by persist with the
// lock released, and only then made visible, so that no answer, status or
// metric ever shows what a restart would not find, and no reader waits on
// the disk. Recorded changes are serialised (one is persisted and
// published before the next is decided), so the file never goes back to
// an older state. Reads (status) never change anything: a lease past its
// expiry is reported as expired, and only expire removes it.
type ledger struct {
	now     func() time.Time
	persist func(*state) error
	lease   time.Duration
	// pauseTimeout is serve.pause_timeout: a pause recorded longer ago is
	// ended by expirePause; 0: never.
	pauseTimeout time.Duration
	buffer       int               // serve.buffer_steps
	fill         int               // ledgerConfig.Fill
	bound        func(v int64) int // ledgerConfig.Bound; nil: none
	supply       *groups.Supply    // the run's demand; nil in tests
	policy       *generate.Policy  // published after the state records it
	// maxStale is serve.max_staleness (-1: none) and dropStale whether
	// serve.on_stale drops a group too stale to serve (requeue, drop)
	// rather than keeping it: a queued group whose oldest token is more
	// than maxStale versions behind the policy is then never served.
	maxStale  int64
	dropStale bool
	// discard, when set, tells the staleness gate that n groups it
	// counted as accepted will never be consumed (found stale in the
	// queue): their places are free again.
	discard func(n int)
	// unserved, under serve.on_stale requeue, holds the run's tasks of
	// the groups not handed out: a group found stale has its task
	// sampled again once the state records it stale; nil otherwise.
	unserved *groups.Unserved

	// recording serialises the changes the state file records.
	recording sync.Mutex

	mu       sync.Mutex
	st       *state // as last recorded; replaced, never changed in place
	next     int64  // the number of the next step
	steps    map[int64]*stepState
	assigned map[groupRef]bool // groups in a step, or being made one
	queued   map[groupRef]*group
	queue    []*group
	waiters  []*waiter
	leases   map[slot]time.Time // a leased step's (or rank's slice's) expiry
	// lastExpiry is, by step, the expiry of its latest lease (any
	// slot): a step unleased a whole serve.lease past it is stranded
	// (stranded), and a caller of another kind may take it.
	lastExpiry map[int64]time.Time
	// converting are the steps granted to a rank of a world other than
	// theirs (a stranded step cut anew), by world, until the state
	// records it: the world's other ranks take their slices of it.
	converting map[int64]int
	handed     map[slot]bool // the slots served since the start
	making     map[int]int   // by world (> 0): the steps granted and not yet recorded or given back
	recent     []int         // the K of the last recentRequests requests, oldest first
	// stale are the groups found too stale to serve (recorded in the
	// state's Stale, or to be with its next record: unrecorded, the
	// newest of them); never served, never queued again.
	stale map[groupRef]bool
	// staleWatch is the guard on the share of kept groups set aside as
	// stale among the latest decided.
	staleWatch *staleWatch
	unrecorded []groupRef
	ended      error             // the run ended: no more groups come
	meta       map[string]string // the data files' metadata
	counts     counts
}

// ledgerConfig is what a ledger starts from.
type ledgerConfig struct {
	// State is the recorded state (loadState); its policy version and
	// pause are applied to Policy.
	State *state
	// Persist records a state; it is called outside the ledger's lock,
	// one call at a time.
	Persist func(*state) error
	// Now is the clock; default time.Now.
	Now   func() time.Time
	Lease time.Duration
	// PauseTimeout is serve.pause_timeout (0: a pause lasts until a
	// resume).
	PauseTimeout time.Duration
	Buffer       int
	// Fill is the fewest kept groups a look-ahead of buffer_steps > 0
	// holds: those that keep the fleet's generate.concurrency busy
	// (fillGroups). 0: a look-ahead of buffer_steps steps alone.
	Fill int
	// Bound, when set (serve.max_staleness), is the kept groups the
	// staleness gate lets the run accept in all at policy version v
	// ((v + max_staleness + 1) × step_groups): the demand is at least
	// that, so the bound, not buffer_steps, limits the look-ahead.
	Bound func(v int64) int
	// MaxStaleness is serve.max_staleness (nil: none) and OnStale
	// serve.on_stale: under requeue or drop a queued group whose oldest
	// token is more than MaxStaleness versions behind the policy when a
	// step is made is not served (dropStale).
	MaxStaleness *int
	OnStale      string
	// Unserved, under OnStale requeue, holds the run's tasks of the
	// groups not handed out (runner.Continuous.Unserved): the ledger
	// tells it of the groups queued (Expect), handed out (Release) and
	// recorded stale (Requeue). nil: no task is sampled again.
	Unserved *groups.Unserved
	Supply   *groups.Supply
	// StaleWindow is the stale guard's window: the latest kept groups
	// decided over which the share set aside as stale is watched
	// (staleWindow; 0: its least).
	StaleWindow int
	// Policy is the fleet's policy; default a new one.
	Policy *generate.Policy
}

// recentRequests is how many of the latest requests' K the standing
// demand follows: a step of serve.buffer_steps is the largest of them.
const recentRequests = 8

// noteRequest adds a request's K to the recent ones. l.mu is held.
func (l *ledger) noteRequest(k int) {
	l.recent = append(l.recent, k)
	if n := len(l.recent); n > recentRequests {
		l.recent = slices.Delete(l.recent, 0, n-recentRequests)
	}
}

// stepSize is the size of a step of serve.buffer_steps: the largest K of
// the recent requests (0 before the first). l.mu is held.
func (l *ledger) stepSize() int {
	if len(l.recent) == 0 {
		return 0
	}
	return slices.Max(l.recent)
}

// counts are the service's counters since it started.
type counts struct {
	served, reserved, acked, expired int64
}

// slot is what a lease holds: a step served whole (rank 0, world 0), or
// one rank's slice of a step served to a data-parallel job of world
// ranks.
type slot struct {
	step int64
	rank int
}

// waiter is a trainer waiting for a step of k groups: the whole step
// (world 0), or rank's slice of a step for world ranks.
type waiter struct {
	k, rank, world int
	ch             chan grant // buffered: dispatch never blocks
}

// grant is what a waiter gets: fresh groups to make a new step of, a step
// to serve again, or the reason none will come.
type grant struct {
	fresh []*group
	step  *stepState
	// rank is the slot the step is leased in: the waiter's rank, or
	// wholeRank for a whole-step caller given a world's step.
	rank int
	err  error
}

// newLedger returns a ledger over a recorded state, with the state's
// policy version and pause applied to the policy.
func newLedger(c ledgerConfig) (*ledger, error) {
	st := c.State
	if st == nil {
		st = &state{Version: stateVersion, Next: 1}
	}
	l := &ledger{
		now: c.Now, persist: c.Persist, lease: c.Lease, pauseTimeout: c.PauseTimeout, buffer: c.Buffer, fill: c.Fill, bound: c.Bound, supply: c.Supply, policy: c.Policy,
		st: st, next: max(st.Next, 1), steps: map[int64]*stepState{}, assigned: map[groupRef]bool{},
		queued: map[groupRef]*group{}, leases: map[slot]time.Time{}, handed: map[slot]bool{}, making: map[int]int{},
		lastExpiry: map[int64]time.Time{}, converting: map[int64]int{}, stale: map[groupRef]bool{}, maxStale: -1,
		staleWatch: newStaleWatch(max(c.StaleWindow, staleWindow(0))),
	}
	if c.MaxStaleness != nil {
		l.maxStale = int64(*c.MaxStaleness)
		l.dropStale = c.OnStale != groups.StaleKeep
	}
	for _, g := range st.Stale {
		l.stale[g] = true
	}
	if l.dropStale && c.OnStale != groups.StaleDrop {
		l.unserved = c.Unserved
	}
	// The groups recorded stale have their tasks sampled again unless
	// their new attempt was committed (the run, resumed, decides as it
	// reads them: groups.Unserved.Resumed and Settle).
	l.requeue(st.Stale)
	if l.now == nil {
		l.now = time.Now
	}
	if l.persist == nil {
		l.persist = func(*state) error { return nil }
	}
	if l.policy == nil {
		l.policy = generate.NewPolicy(st.Policy)
	} else if err := l.policy.SetVersion(st.Policy); err != nil {
		return nil, err
	}
	if st.Paused != "" {
		if err := l.policy.Pause(generate.PauseMode(st.Paused)); err != nil {
			return nil, fmt.Errorf("the recorded pause: %w", err)
		}
	}
	now := l.now()
	for _, step := range st.Steps {
		l.steps[step.Step] = step
		if !step.Acked && now.Before(step.LeasedUntil) {
			l.setLease(slot{step.Step, step.LeasedRank}, step.LeasedUntil)
		}
		for rank, until := range step.RankLeases {
			s := slot{step.Step, rank}
			if !step.Acked && !slices.Contains(step.RanksAcked, rank) && now.Before(until) && until.After(l.leases[s]) {
				l.setLease(s, until)
			}
		}
		for _, exp := range append([]time.Time{step.LeasedUntil}, slices.Collect(maps.Values(step.RankLeases))...) {
			if exp.After(l.lastExpiry[step.Step]) {
				l.lastExpiry[step.Step] = exp
			}
		}
		for _, g := range step.made() {
			l.assigned[g] = true
		}
		l.noteRequest(len(step.Groups)) // the recorded steps stand for the requests before the restart
		l.next = max(l.next, step.Step+1)
	}
	// The look-ahead stands before the first request: the fleet starts
	// at once.
	l.setDemand()
	return l, nil
}

// clone returns a copy of the state whose Steps can be changed without
// touching st's.
func (st *state) clone() *state {
	c := *st
	c.Steps = slices.Clone(st.Steps)
	return &c
}

// record makes a change the state file records: decide (under the lock)
// returns the state to record, or nil when nothing changes; persist
// writes it (outside the lock); publish (under the lock) makes it visible.
// On an error nothing is published.
func (l *ledger) record(decide func() (*state, error), publish func(*state)) error {
	l.recording.Lock()
	defer l.recording.Unlock()
	l.mu.Lock()
	next, err := decide()
	stale := len(l.unrecorded)
	if next != nil {
		next.Next = l.next
		if stale > 0 {
			// The groups found stale since the last record go with
			// this one.
			next.Stale = slices.Concat(next.Stale, l.unrecorded)
		}
	}
	l.mu.Unlock()
	if err != nil || next == nil {
		return err
	}
	if err := l.persist(next); err != nil {
		return fmt.Errorf("%w: %w", errNotRecorded, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st = next
	// The groups recorded stale now have their tasks sampled again:
	// only once recorded, so that a restart never samples one a second
	// time (a group found stale and not recorded is found stale again).
	l.requeue(l.unrecorded[:stale])
	l.unrecorded = slices.Delete(l.unrecorded, 0, stale)
	publish(next)
	return nil
}

// requeue has the tasks of groups recorded stale sampled again (under
// serve.on_stale requeue).
func (l *ledger) requeue(refs []groupRef) {
	if l.unserved != nil && len(refs) > 0 {
		l.unserved.Requeue(keysOf(refs)...)
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

// recordStale records the groups found stale since the last record, when
// there are any, without another change: their tasks are then sampled
// again (serve.on_stale requeue) without waiting for the next step,
// policy version or pause.
func (l *ledger) recordStale() error {
	err := l.record(func() (*state, error) {
		if len(l.unrecorded) == 0 {
			return nil, nil
		}
		return l.st.clone(), nil
	}, func(*state) {})
	if err != nil {
		return fmt.Errorf("recording the groups found stale: %w", err)
	}
	return nil
}

// taken reports whether a group is in a step, being made one, or queued.
func (l *ledger) taken(ref groupRef) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.assigned[ref] || l.queued[ref] != nil || l.stale[ref]
}

// enqueue adds kept groups to the queue (those taken meanwhile are
// released instead) and serves the waiting trainers. meta is the data
// files' metadata, kept from the first file.
func (l *ledger) enqueue(fresh []*group, meta map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.meta == nil {
		l.meta = meta
	}
	for _, g := range fresh {
		if l.assigned[g.ref] || l.queued[g.ref] != nil || l.stale[g.ref] {
			g.release()
			continue
		}
		if len(g.versions) == 0 {
			g.versions = []int64{0}
		}
		l.queued[g.ref] = g
		l.queue = append(l.queue, g)
		if l.unserved != nil {
			l.unserved.Expect(g.ref.key())
		}
	}
	l.dispatch()
}

// metadata returns the data files' metadata (nil before the first file).
func (l *ledger) metadata() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.meta
}

// accepted is the number of kept groups in steps or queued.
func (l *ledger) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.assigned) + len(l.queue)
}

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

// dispatch hands steps to the waiting trainers, first come first served:
// a step to be served again, whatever its size, else fresh groups from
// the queue; when the run ended, those that cannot be served are told
// so. It then sets the run's demand. l.mu is held.
func (l *ledger) dispatch() {
	l.expire()
	l.dropStaleGroups()
	blocked := false
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if st := l.pendingStep(w); st != nil {
			s := slot{st.Step, w.rank}
			switch {
			case w.world == 0 && st.World > 0:
				s.rank = wholeRank
			case w.world > 0 && st.World != w.world:
				l.converting[st.Step] = w.world
			}
			l.setLease(s, l.now().Add(l.lease))
			if l.handed[s] || st.World == 0 {
				l.counts.reserved++
			}
			l.handed[s] = true
			w.ch <- grant{step: st, rank: s.rank}
			continue
		}
		if w.world > 0 && l.making[w.world] > 0 {
			// Another rank's step for this world is being made: this
			// rank takes its slice of it, not a step of its own.
			kept = append(kept, w)
			continue
		}
		if !blocked && len(l.queue) >= w.k {
			fresh := l.takeOldest(w.k)
			for _, g := range fresh {
				delete(l.queued, g.ref)
				l.assigned[g.ref] = true
			}
			if w.world > 0 {
				l.making[w.world]++
			}
			w.ch <- grant{fresh: fresh}
			continue
		}
		if l.ended != nil {
			w.ch <- grant{err: fmt.Errorf("%w: %d kept groups are queued and the step asks for %d (%v)", errEnded, len(l.queue), w.k, l.ended)}
			continue
		}
		blocked = true
		kept = append(kept, w)
	}
	clear(l.waiters[len(kept):])
	l.waiters = kept
	l.setDemand()
}

// tooStale reports whether a queued group's oldest token is more than
// serve.max_staleness versions behind the policy: served now, a trainer
// at the current version would train on it past the bound. l.mu is held.
func (l *ledger) tooStale(g *group) bool {
	return l.maxStale >= 0 && len(g.versions) > 0 && l.st.Policy-g.versions[0] > l.maxStale
}

// dropStaleGroups takes the queued groups too stale to serve out of the
// queue (serve.on_stale requeue or drop): the state records them with its
// next change (unrecorded; recordStale, at the service's next tick, at
// the latest), under requeue their tasks are then sampled again, and the
// staleness gate gets their places back. Versions only grow, so a group
// found stale stays stale: one a crash leaves unrecorded is found stale
// again after the restart, and none is ever served. l.mu is held.
func (l *ledger) dropStaleGroups() {
	if !l.dropStale {
		return
	}
	n := 0
	kept := l.queue[:0]
	for _, g := range l.queue {
		if !l.tooStale(g) {
			kept = append(kept, g)
			continue
		}
		delete(l.queued, g.ref)
		l.stale[g.ref] = true
		l.staleWatch.add(true, g.versions[0])
		l.unrecorded = append(l.unrecorded, g.ref)
		g.release()
		n++
	}
	clear(l.queue[len(kept):])
	l.queue = kept
	if n > 0 && l.discard != nil {
		l.discard(n)
	}
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
		l.staleWatch.add(false, 0)
	}
	l.queue = slices.DeleteFunc(l.queue, func(g *group) bool { return taken[g.ref] })
	return fresh
}

// staleCheck turns the stale guard's alarm on or off as its window says
// and returns the line to log when it changed ("" otherwise).
func (l *ledger) staleCheck() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.staleWatch.check(l.now(), l.st.Policy, l.maxStale)
}

// setDiscard sets the function told of the groups found stale in the
// queue (the staleness gate's Discard).
func (l *ledger) setDiscard(fn func(n int)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.discard = fn
}

// setDemand raises the run's demand to the kept groups that are in steps,
// those the waiting trainers ask for, and the look-ahead: serve.buffer_steps
// steps, a step being the largest K of the recent requests (stepSize, so
// that a single large request does not set the look-ahead for good), and
// at least the groups that keep the fleet busy (Fill). Under
// serve.max_staleness the demand is at least what the staleness bound
// lets the run accept at the current version (Bound): the bound paces
// generation, not the look-ahead. The demand only grows (the run cannot
// take back what it admitted); a smaller look-ahead shows as a slower
// growth. l.mu is held.
func (l *ledger) setDemand() {
	ahead := l.buffer * l.stepSize()
	if l.buffer > 0 {
		ahead = max(ahead, l.fill)
	}
	// The groups found stale were kept groups of the run's: the
	// demand counts them, so that others replace them.
	want := len(l.assigned) + len(l.stale) + ahead
	worlds := map[int]bool{}
	for _, w := range l.waiters {
		if w.world > 0 {
			// The ranks of a world waiting share one step: counted once,
			// and not at all while one is being made.
			if worlds[w.world] || l.making[w.world] > 0 {
				continue
			}
			worlds[w.world] = true
		}
		want += w.k
	}
	if l.bound != nil {
		want = max(want, l.bound(l.st.Policy)+len(l.stale))
	}
	if l.supply != nil {
		l.supply.Raise(want)
	}
}

// fillGroups is the kept groups that keep concurrency generation slots
// busy with groups of n: one group's worth of slots per group, rounded
// up (a group in flight holds at least one kept group's rollouts).
func fillGroups(concurrency, n int) int {
	if n < 1 {
		return 0
	}
	return (concurrency + n - 1) / n
}

// staleBound is the kept groups the staleness gate lets a run accept in
// all at version v: (v + maxStaleness + 1) × stepGroups.
func staleBound(maxStaleness, stepGroups int) func(v int64) int {
	return func(v int64) int {
		return int((max(v, 0) + int64(maxStaleness) + 1) * int64(stepGroups))
	}
}

// wait registers a trainer asking for a step of k groups (world 0: whole;
// else rank's slice of a step for world ranks) and returns its waiter;
// cancel takes it back.
func (l *ledger) wait(k, rank, world int) *waiter {
	w := &waiter{k: k, rank: rank, world: world, ch: make(chan grant, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteRequest(k)
	l.waiters = append(l.waiters, w)
	l.dispatch()
	return w
}

// cancel takes back a waiter whose trainer went away; what was granted to
// it and not taken goes back: fresh groups to the head of the queue, a
// step to those to be served again.
func (l *ledger) cancel(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiters = slices.DeleteFunc(l.waiters, func(x *waiter) bool { return x == w })
	select {
	case g := <-w.ch:
		l.giveBack(g)
		if g.step == nil && len(g.fresh) > 0 {
			l.madeFor(w.world)
		}
	default:
	}
	l.dispatch()
}

// unmade returns fresh groups whose step (for world, 0: whole) could not
// be made to the head of the queue.
func (l *ledger) unmade(fresh []*group, world int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.giveBack(grant{fresh: fresh})
	l.madeFor(world)
	l.dispatch()
}

// madeFor records that a step granted to a rank of world was made or
// given back: the world's other ranks may then be served. l.mu is held.
func (l *ledger) madeFor(world int) {
	if world > 0 {
		if l.making[world]--; l.making[world] <= 0 {
			delete(l.making, world)
		}
	}
}

// giveBack returns a grant not served; l.mu is held.
func (l *ledger) giveBack(g grant) {
	if g.step != nil {
		delete(l.leases, slot{g.step.Step, g.rank})
		delete(l.converting, g.step.Step)
		if g.step.World == 0 {
			l.counts.reserved--
		}
	}
	for _, gr := range g.fresh {
		delete(l.assigned, gr.ref)
		l.queued[gr.ref] = gr
	}
	l.queue = append(slices.Clone(g.fresh), l.queue...)
}

// end records that no more groups come (the run ended: err, nil when the
// input ran out) and tells the waiters that cannot be served.
func (l *ledger) end(err error) {
	if err == nil {
		err = errors.New("the input ran out")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = err
	l.dispatch()
}

// tick expires the leases past their expiry and serves the steps they
// free.
func (l *ledger) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dispatch()
}

// reserve returns the number of a new step.
func (l *ledger) reserve() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	l.next++
	return n
}

// recordStep records a new step made of granted groups, leased to its
// caller (st.LeasedRank's slice, for a step of a world) until serve.lease
// from now: in the state file first (the lease too, which a restart
// keeps), then in the ledger. On an error the caller gives the groups
// back (unmade).
func (l *ledger) recordStep(st *stepState) error {
	err := l.record(func() (*state, error) {
		st.LeasedUntil = l.now().Add(l.lease).UTC()
		next := l.st.clone()
		next.Steps = append(next.Steps, st)
		return next, nil
	}, func(*state) {
		l.steps[st.Step] = st
		if l.unserved != nil {
			l.unserved.Release(keysOf(st.Groups)...)
		}
		s := slot{st.Step, st.LeasedRank}
		l.setLease(s, st.LeasedUntil)
		l.handed[s] = true
		l.counts.served++
		if st.World > 0 {
			// The world's other ranks waiting take their slices now.
			l.madeFor(st.World)
			l.dispatch()
		}
	})
	if err != nil {
		return fmt.Errorf("recording step %d: %w", st.Step, err)
	}
	return nil
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
func (l *ledger) ack(n int64, rank, world int) (*stepState, error) {
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

// version is the policy version the ledger recorded and published.
func (l *ledger) version() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.Policy
}

// status fills the ledger's part of the service's status. It changes
// nothing: a lease past its expiry counts as expired (and its step as to
// be served again) whether or not expire has removed it yet.
func (l *ledger) status(out *client.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out.PolicyVersion = l.st.Policy
	if l.st.Paused != "" {
		out.Paused, out.PauseMode = true, l.st.Paused
		out.PausedSince, out.PausedBy = l.st.PausedAt, l.st.PausedBy
		if l.pauseTimeout > 0 {
			out.PauseExpires = l.st.PausedAt.Add(l.pauseTimeout)
		}
	}
	out.QueuedGroups = len(l.queue)
	out.Waiting = []int{}
	for _, w := range l.waiters {
		out.Waiting = append(out.Waiting, w.k)
	}
	if l.supply != nil {
		out.Demand = l.supply.Target()
	}
	expired := l.counts.expired
	for _, exp := range l.leases {
		if !now.Before(exp) {
			expired++
		}
	}
	out.Leases = []client.Lease{}
	leased := map[int64]bool{}
	for s, exp := range l.leases {
		if now.Before(exp) {
			leased[s.step] = true
			lease := client.Lease{Step: s.step, Expires: exp.UTC()}
			if st := l.steps[s.step]; st != nil && st.World > 0 {
				lease.Rank = &s.rank
			}
			out.Leases = append(out.Leases, lease)
		}
	}
	for _, st := range l.st.Steps {
		out.Steps.Made++
		switch {
		case st.Acked:
			out.Steps.Acked++
			out.LastAckedStep = max(out.LastAckedStep, st.Step)
		case leased[st.Step]:
			out.Steps.Leased++
		default:
			out.Steps.Pending++
		}
	}
	sort.Slice(out.Leases, func(i, j int) bool {
		a, b := out.Leases[i], out.Leases[j]
		if a.Step != b.Step || a.Rank == nil || b.Rank == nil {
			return a.Step < b.Step
		}
		return *a.Rank < *b.Rank
	})
	out.NextStep = l.next
	out.Served, out.Reserved, out.Expired, out.Acked = l.counts.served, l.counts.reserved, expired, l.counts.acked
	out.StaleGroups = len(l.stale)
	out.StaleShare = l.staleWatch.share()
	out.StaleAlarm = l.staleWatch.report(l.st.Policy, l.maxStale)
	if l.unserved != nil {
		out.RequeuedGroups = l.unserved.Requeued()
	}
	out.Staleness = map[string]int{}
	for _, g := range l.queue {
		lag := out.PolicyVersion - g.versions[0]
		out.Staleness[fmt.Sprint(max(lag, 0))]++
	}
	if l.ended != nil {
		out.Ended = l.ended.Error()
	}
}

// close releases the queued groups' records.
func (l *ledger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range l.queue {
		g.release()
	}
	l.queue = nil
	clear(l.queued)
}
