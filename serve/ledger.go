package serve

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

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
	policy       *generate.Policy // published after the state records it
	// dem sets the run's demand; sp decides which queued groups are too
	// stale to serve: the policies the ledger consults under its lock.
	dem demand
	sp  stalePolicy

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
	handed     map[slot]bool     // the slots served since the start
	making     map[int]int       // by world (> 0): the steps granted and not yet recorded or given back
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
	// Staleness is serve.max_staleness's bound (nil: none;
	// config.ServeConfig.Staleness): the demand is at least the kept
	// groups it lets the run accept in all at policy version v
	// (groups.Bound.Groups), so the bound, not buffer_steps, limits the
	// look-ahead (a bound without StepGroups, a test's, leaves the demand
	// alone); and OnStale is serve.on_stale: under requeue or drop a
	// queued group too stale when a step is made (groups.Bound.Stale) is
	// not served (dropStale).
	Staleness *groups.Bound
	OnStale   string
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
		now: c.Now, persist: c.Persist, lease: c.Lease, pauseTimeout: c.PauseTimeout, policy: c.Policy,
		dem: demand{buffer: c.Buffer, fill: c.Fill, bound: c.Staleness, supply: c.Supply},
		sp:  newStalePolicy(c.Staleness, c.OnStale, c.Unserved, c.StaleWindow, st.Stale),
		st:  st, next: max(st.Next, 1), steps: map[int64]*stepState{}, assigned: map[groupRef]bool{},
		queued: map[groupRef]*group{}, leases: map[slot]time.Time{}, handed: map[slot]bool{}, making: map[int]int{},
		lastExpiry: map[int64]time.Time{}, converting: map[int64]int{},
	}
	// The groups recorded stale have their tasks sampled again unless
	// their new attempt was committed (the run, resumed, decides as it
	// reads them: groups.Unserved.Resumed and Settle).
	l.sp.requeue(st.Stale)
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
		l.dem.noteRequest(len(step.Groups)) // the recorded steps stand for the requests before the restart
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
	stale := len(l.sp.unrecorded)
	if next != nil {
		next.Next = l.next
		if stale > 0 {
			// The groups found stale since the last record go with
			// this one.
			next.Stale = slices.Concat(next.Stale, l.sp.unrecorded)
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
	l.sp.requeue(l.sp.unrecorded[:stale])
	l.sp.unrecorded = slices.Delete(l.sp.unrecorded, 0, stale)
	publish(next)
	return nil
}

// taken reports whether a group is in a step, being made one, or queued.
func (l *ledger) taken(ref groupRef) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.assigned[ref] || l.queued[ref] != nil || l.sp.stale[ref]
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
		if l.assigned[g.ref] || l.queued[g.ref] != nil || l.sp.stale[g.ref] {
			g.release()
			continue
		}
		if len(g.versions) == 0 {
			g.versions = []int64{0}
		}
		l.queued[g.ref] = g
		l.queue = append(l.queue, g)
		if l.sp.unserved != nil {
			l.sp.unserved.Expect(g.ref.key())
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

// wait registers a trainer asking for a step of k groups (world 0: whole;
// else rank's slice of a step for world ranks) and returns its waiter;
// cancel takes it back.
func (l *ledger) wait(k, rank, world int) *waiter {
	w := &waiter{k: k, rank: rank, world: world, ch: make(chan grant, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dem.noteRequest(k)
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
		if l.sp.unserved != nil {
			l.sp.unserved.Release(keysOf(st.Groups)...)
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
