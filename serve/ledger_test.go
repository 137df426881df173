package serve

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// store is a persist function's record: the states it was given, and an
// error to fail with.
type store struct {
	mu     sync.Mutex
	states []*state
	fail   error
}

func (s *store) persist(st *state) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.states = append(s.states, st)
	return nil
}

func (s *store) last() *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.states) == 0 {
		return nil
	}
	return s.states[len(s.states)-1]
}

func (s *store) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.states)
}

const testLease = 10 * time.Second

// newTestLedger is a ledger over st (nil: a fresh state) with a fake clock
// and a store.
func newTestLedger(t *testing.T, st *state) (*ledger, *fakeClock, *store) {
	t.Helper()
	clock, db := newFakeClock(), &store{}
	l, err := newLedger(ledgerConfig{State: st, Persist: db.persist, Now: clock.now, Lease: testLease})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock, db
}

// testGroups returns n groups of tasks from, from+1, … (attempt 0), of
// policy version 0.
func testGroups(from, n int) []*group {
	out := make([]*group, n)
	for i := range out {
		out[i] = &group{ref: groupRef{int64(from + i), 0}, rows: 4}
	}
	return out
}

// granted returns what a waiter was given, or fails.
func granted(t testing.TB, w *waiter) grant {
	t.Helper()
	select {
	case g := <-w.ch:
		return g
	default:
		t.Fatal("the waiter was given nothing")
		return grant{}
	}
}

// serveStep asks for a step of k groups and makes it (a new step of fresh
// groups is recorded); it returns the step's number and whether it was
// served again.
func serveStep(t *testing.T, l *ledger, k int) (int64, bool) {
	t.Helper()
	g := granted(t, l.wait(k, 0, 0))
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.step != nil {
		return g.step.Step, true
	}
	st := &stepState{Step: l.reserve()}
	for _, gr := range g.fresh {
		st.Groups = append(st.Groups, gr.ref)
		st.Rows += gr.rows
	}
	if err := l.recordStep(st); err != nil {
		t.Fatal(err)
	}
	return st.Step, false
}

func statusOf(l *ledger) client.Status {
	var st client.Status
	l.status(&st)
	return st
}

// A step is leased to its caller; unacknowledged past the lease it is
// served again, whole and under its number; acknowledged, never again.
func TestLedgerLeaseAckExpiry(t *testing.T) {
	for _, tt := range []struct {
		name        string
		ack         bool
		after       time.Duration     // between the first request and the second
		wantAgain   bool              // the second request gets step 1 again
		wantStatus  client.StepCounts // after the second request
		wantExpired int64
	}{
		{"within the lease: a new step", false, testLease - time.Second, false, client.StepCounts{Made: 2, Leased: 2}, 0},
		{"at the lease's end: served again", false, testLease, true, client.StepCounts{Made: 1, Leased: 1}, 1},
		{"long past the lease: served again", false, 3 * testLease, true, client.StepCounts{Made: 1, Leased: 1}, 1},
		{"acknowledged: never again", true, 3 * testLease, false, client.StepCounts{Made: 2, Acked: 1, Leased: 1}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, clock, db := newTestLedger(t, nil)
			l.enqueue(testGroups(0, 4), nil)
			first, again := serveStep(t, l, 2)
			if first != 1 || again {
				t.Fatalf("first step %d (again %v), want 1", first, again)
			}
			if tt.ack {
				if _, err := l.ack(first, 0, 0, nil); err != nil {
					t.Fatal(err)
				}
			}
			clock.advance(tt.after)
			second, again := serveStep(t, l, 2)
			if again != tt.wantAgain || (again && second != first) {
				t.Fatalf("second request: step %d, again %v; want again %v", second, again, tt.wantAgain)
			}
			st := statusOf(l)
			if st.Steps != tt.wantStatus || st.Expired != tt.wantExpired {
				t.Fatalf("status steps %+v expired %d, want %+v expired %d", st.Steps, st.Expired, tt.wantStatus, tt.wantExpired)
			}
			wantReserved := int64(0)
			if tt.wantAgain {
				wantReserved = 1
			}
			if st.Reserved != wantReserved {
				t.Fatalf("reserved %d, want %d", st.Reserved, wantReserved)
			}
			// Every step made is in the state file.
			if got := len(db.last().Steps); got != st.Steps.Made {
				t.Fatalf("the state file records %d steps, the status %d", got, st.Steps.Made)
			}
		})
	}
}

// Reads never change state: the status reports a lease past its expiry as
// expired (its step to be served again) without removing it, as often as
// it is asked; the tick removes it and counts it once.
func TestLedgerStatusDoesNotExpire(t *testing.T) {
	l, clock, _ := newTestLedger(t, nil)
	l.enqueue(testGroups(0, 2), nil)
	n, _ := serveStep(t, l, 2)
	clock.advance(testLease + time.Second)
	for i := range 3 {
		st := statusOf(l)
		if st.Steps.Pending != 1 || st.Steps.Leased != 0 || st.Expired != 1 || len(st.Leases) != 0 {
			t.Fatalf("status %d: %+v", i, st)
		}
	}
	l.mu.Lock()
	_, still := l.leases[slot{n, 0}]
	counted := l.counts.expired
	l.mu.Unlock()
	if !still || counted != 0 {
		t.Fatalf("after the status: lease kept %v, expired counted %d; want kept, 0", still, counted)
	}
	l.tick()
	l.tick()
	st := statusOf(l)
	l.mu.Lock()
	_, still = l.leases[slot{n, 0}]
	l.mu.Unlock()
	if still || st.Expired != 1 || st.Steps.Pending != 1 {
		t.Fatalf("after the tick: lease kept %v, status %+v", still, st)
	}
}

// An ack of a step never served is errNeverServed; an ack twice is a
// no-op recorded once.
func TestLedgerAck(t *testing.T) {
	l, _, db := newTestLedger(t, nil)
	l.enqueue(testGroups(0, 2), nil)
	n, _ := serveStep(t, l, 2)
	for _, tt := range []struct {
		step    int64
		wantErr error
		writes  int // state writes so far (1: the step)
	}{
		{99, errNeverServed, 1},
		{n, nil, 2},
		{n, nil, 2},
	} {
		st, err := l.ack(tt.step, 0, 0, nil)
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Fatalf("ack %d: %v, want %v", tt.step, err, tt.wantErr)
		}
		if err == nil && (!st.Acked || st.Step != n) {
			t.Fatalf("ack %d: %+v", tt.step, st)
		}
		if db.count() != tt.writes {
			t.Fatalf("ack %d: %d state writes, want %d", tt.step, db.count(), tt.writes)
		}
	}
	if !db.last().Steps[0].Acked {
		t.Fatal("the state file does not record the ack")
	}
}

// Policy versions only grow: a lower one is errVersionBelow, an equal one
// a no-op; each new one is recorded, then given to the fleet.
func TestLedgerVersions(t *testing.T) {
	l, _, db := newTestLedger(t, nil)
	for _, tt := range []struct {
		v       int64
		wantErr error
		want    int64
		writes  int
	}{
		{0, nil, 0, 0},
		{3, nil, 3, 1},
		{3, nil, 3, 1},
		{2, errVersionBelow, 3, 1},
		{7, nil, 7, 2},
	} {
		err := l.setVersion(tt.v)
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Fatalf("version %d: %v, want %v", tt.v, err, tt.wantErr)
		}
		if got := l.policy.Version(); got != tt.want || l.version() != tt.want || statusOf(l).PolicyVersion != tt.want {
			t.Fatalf("version %d: fleet %d, ledger %d, want %d", tt.v, got, l.version(), tt.want)
		}
		if db.count() != tt.writes {
			t.Fatalf("version %d: %d writes, want %d", tt.v, db.count(), tt.writes)
		}
	}
	if db.last().Policy != 7 {
		t.Fatalf("recorded version %d", db.last().Policy)
	}
}

// A pause and a resume are recorded before the fleet sees them; a mode
// other than abort and keep is errPauseMode.
func TestLedgerPauseResume(t *testing.T) {
	l, clock, db := newTestLedger(t, nil)
	for _, tt := range []struct {
		op       string // pause MODE or resume
		mode     generate.PauseMode
		wantErr  error
		paused   string // the recorded and published mode; "" not paused
		writes   int
		wantMode generate.PauseMode
	}{
		{"resume", "", nil, "", 0, ""},
		{"pause", generate.PauseAbort, nil, "abort", 1, generate.PauseAbort},
		// A pause while paused is recorded anew: its time and by.
		{"pause", generate.PauseAbort, nil, "abort", 2, generate.PauseAbort},
		{"pause", generate.PauseKeep, nil, "keep", 3, generate.PauseKeep},
		{"pause", "stop", errPauseMode, "keep", 3, generate.PauseKeep},
		{"resume", "", nil, "", 4, ""},
	} {
		clock.advance(time.Minute)
		by := fmt.Sprintf("trainer-%d", db.count())
		var err error
		if tt.op == "pause" {
			err = l.pause(tt.mode, by)
		} else {
			err = l.resume()
		}
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Fatalf("%s %s: %v, want %v", tt.op, tt.mode, err, tt.wantErr)
		}
		paused, mode := l.policy.Paused()
		st := statusOf(l)
		if paused != (tt.paused != "") || (paused && mode != tt.wantMode) || st.Paused != paused || st.PauseMode != tt.paused {
			t.Fatalf("%s %s: fleet paused %v (%s), status %v (%s); want %q", tt.op, tt.mode, paused, mode, st.Paused, st.PauseMode, tt.paused)
		}
		if db.count() != tt.writes {
			t.Fatalf("%s %s: %d writes, want %d", tt.op, tt.mode, db.count(), tt.writes)
		}
		if tt.writes > 0 && db.last().Paused != tt.paused {
			t.Fatalf("%s %s: recorded %q, want %q", tt.op, tt.mode, db.last().Paused, tt.paused)
		}
		// Since when and by whom: recorded and shown while paused, gone
		// after the resume.
		if tt.wantErr == nil {
			wantBy, wantSince := by, clock.now()
			if !paused {
				wantBy, wantSince = "", time.Time{}
			}
			if st.PausedBy != wantBy || !st.PausedSince.Equal(wantSince) {
				t.Fatalf("%s %s: status paused since %v by %q, want %v by %q", tt.op, tt.mode, st.PausedSince, st.PausedBy, wantSince, wantBy)
			}
			if last := db.last(); last != nil && (last.PausedBy != wantBy || !last.PausedAt.Equal(wantSince)) {
				t.Fatalf("%s %s: recorded since %v by %q, want %v by %q", tt.op, tt.mode, last.PausedAt, last.PausedBy, wantSince, wantBy)
			}
		}
	}
}

// serve.pause_timeout: a pause no resume ended within the timeout is
// ended by expirePause, recorded, and only then the fleet goes on; a
// pause renewed meanwhile counts from its new time; a restarted ledger
// counts from the recorded time; without a timeout a pause lasts.
func TestLedgerPauseTimeout(t *testing.T) {
	const timeout = 5 * time.Minute
	newLedgerWith := func(st *state, clock *fakeClock, db *store, d time.Duration) *ledger {
		l, err := newLedger(ledgerConfig{State: st, Persist: db.persist, Now: clock.now, Lease: testLease, PauseTimeout: d})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	clock, db := newFakeClock(), &store{}
	l := newLedgerWith(nil, clock, db, timeout)
	if err := l.pause(generate.PauseAbort, "rank-0"); err != nil {
		t.Fatal(err)
	}
	since := clock.now()
	steps := []struct {
		advance time.Duration
		ends    bool
	}{
		{0, false},
		{timeout - time.Second, false},
		{time.Second, true}, // exactly the timeout
		{timeout, false},    // not paused any more
	}
	for i, s := range steps {
		clock.advance(s.advance)
		writes := db.count()
		p, err := l.expirePause()
		if err != nil {
			t.Fatal(err)
		}
		if (p != nil) != s.ends {
			t.Fatalf("step %d: ended %+v, want %v", i, p, s.ends)
		}
		paused, _ := l.policy.Paused()
		if s.ends {
			if p.Mode != "abort" || p.By != "rank-0" || !p.Since.Equal(since) {
				t.Fatalf("step %d: ended %+v, want the pause by rank-0 since %v", i, p, since)
			}
			if paused || statusOf(l).Paused || db.count() != writes+1 || db.last().Paused != "" {
				t.Fatalf("step %d: fleet paused %v, status %+v, %d writes (recorded %q)", i, paused, statusOf(l), db.count()-writes, db.last().Paused)
			}
		} else if db.count() != writes {
			t.Fatalf("step %d: %d writes without ending a pause", i, db.count()-writes)
		}
	}

	// A pause renewed counts from its new time.
	if err := l.pause(generate.PauseKeep, "rank-0"); err != nil {
		t.Fatal(err)
	}
	clock.advance(timeout - time.Second)
	if err := l.pause(generate.PauseKeep, "rank-1"); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Second)
	if p, _ := l.expirePause(); p != nil {
		t.Fatalf("a renewed pause ended after %v: %+v", 2*time.Second, p)
	}

	// A restart counts from the recorded time, not from the start.
	r := newLedgerWith(db.last(), clock, db, timeout)
	if paused, _ := r.policy.Paused(); !paused {
		t.Fatal("restarted unpaused")
	}
	clock.advance(timeout)
	if p, _ := r.expirePause(); p == nil || p.By != "rank-1" {
		t.Fatalf("restarted: a pause older than the timeout not ended: %+v", p)
	}

	// A pause the state could not unrecord goes on.
	if err := r.pause(generate.PauseAbort, "rank-0"); err != nil {
		t.Fatal(err)
	}
	clock.advance(timeout)
	db.mu.Lock()
	db.fail = errors.New("disk full")
	db.mu.Unlock()
	if p, err := r.expirePause(); !errors.Is(err, errNotRecorded) || p != nil {
		t.Fatalf("unrecorded: %+v, %v; want errNotRecorded", p, err)
	}
	if paused, _ := r.policy.Paused(); !paused {
		t.Fatal("the fleet went on though the state still records the pause")
	}

	// Without a timeout a pause lasts.
	n := newLedgerWith(nil, clock, &store{}, 0)
	if err := n.pause(generate.PauseAbort, "rank-0"); err != nil {
		t.Fatal(err)
	}
	clock.advance(1000 * time.Hour)
	if p, _ := n.expirePause(); p != nil {
		t.Fatalf("no timeout: the pause ended: %+v", p)
	}
}

// A change the state file could not record is errNotRecorded and nothing
// of it is published: not the step, the ack, the version or the pause.
func TestLedgerNothingPublishedUnrecorded(t *testing.T) {
	disk := errors.New("disk full")
	for _, tt := range []struct {
		name   string
		change func(l *ledger) error
		check  func(t *testing.T, l *ledger)
	}{
		{"step", func(l *ledger) error {
			g := granted(t, l.wait(2, 0, 0))
			return l.recordStep(&stepState{Step: l.reserve(), Groups: []groupRef{g.fresh[0].ref, g.fresh[1].ref}})
		}, func(t *testing.T, l *ledger) {
			if st := statusOf(l); st.Steps.Made != 1 || st.Served != 1 {
				t.Fatalf("status %+v", st)
			}
		}},
		{"ack", func(l *ledger) error { _, err := l.ack(1, 0, 0, nil); return err }, func(t *testing.T, l *ledger) {
			if st := statusOf(l); st.Steps.Acked != 0 || st.Acked != 0 || st.Steps.Leased != 1 {
				t.Fatalf("status %+v", st)
			}
		}},
		{"version", func(l *ledger) error { return l.setVersion(5) }, func(t *testing.T, l *ledger) {
			if l.policy.Version() != 0 || statusOf(l).PolicyVersion != 0 {
				t.Fatalf("version %d", l.policy.Version())
			}
		}},
		{"pause", func(l *ledger) error { return l.pause(generate.PauseKeep, "trainer-0") }, func(t *testing.T, l *ledger) {
			if paused, _ := l.policy.Paused(); paused || statusOf(l).Paused {
				t.Fatal("paused")
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, _, db := newTestLedger(t, nil)
			l.enqueue(testGroups(0, 4), nil)
			serveStep(t, l, 2)
			db.mu.Lock()
			db.fail = disk
			db.mu.Unlock()
			err := tt.change(l)
			if !errors.Is(err, errNotRecorded) || !errors.Is(err, disk) {
				t.Fatalf("%v, want errNotRecorded wrapping %v", err, disk)
			}
			tt.check(t, l)
		})
	}
}

// Recorded changes are decided under the lock, persisted outside it and
// published after: while the state is being written, reads answer at
// once and show the state before the change; the change shows once it is
// recorded. Two changes are recorded in the order decided.
func TestLedgerPersistOutsideTheLock(t *testing.T) {
	clock := newFakeClock()
	started, release := make(chan *state, 2), make(chan struct{})
	l, err := newLedger(ledgerConfig{Now: clock.now, Lease: testLease, Persist: func(st *state) error {
		started <- st
		<-release
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- l.setVersion(4) }()
	writing := <-started
	if writing.Policy != 4 {
		t.Fatalf("writing version %d, want 4", writing.Policy)
	}
	// Reads and changes that record nothing do not wait on the disk.
	answered := make(chan client.Status, 1)
	go func() {
		l.enqueue(testGroups(0, 2), nil)
		l.tick()
		answered <- statusOf(l)
	}()
	select {
	case st := <-answered:
		if st.PolicyVersion != 0 || st.QueuedGroups != 2 {
			t.Fatalf("while writing: status %+v, want version 0 (not yet recorded), 2 queued", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the status waited on the state's write")
	}
	// A second change waits for the first to be recorded.
	go func() { done <- l.pause(generate.PauseAbort, "trainer-0") }()
	select {
	case st := <-started:
		t.Fatalf("a second write (%+v) began before the first ended", st)
	case <-time.After(50 * time.Millisecond):
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l.policy.Version() != 4 {
		t.Fatalf("after the write: version %d", l.policy.Version())
	}
	second := <-started
	if second.Policy != 4 || second.Paused != "abort" {
		t.Fatalf("second write %+v, want version 4 and paused", second)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A ledger over a recorded state: the steps not acknowledged are served
// again (their groups never queued), the acknowledged ones never, the
// policy version and the pause are the fleet's, and new steps are
// numbered after the recorded ones.
func TestLedgerRestart(t *testing.T) {
	l, _, db := newTestLedger(t, nil)
	l.enqueue(testGroups(0, 6), nil)
	a, _ := serveStep(t, l, 2)
	b, _ := serveStep(t, l, 2)
	if _, err := l.ack(a, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.setVersion(2); err != nil {
		t.Fatal(err)
	}
	if err := l.pause(generate.PauseKeep, "trainer-0"); err != nil {
		t.Fatal(err)
	}

	r, rclock, _ := newTestLedger(t, db.last())
	if paused, mode := r.policy.Paused(); !paused || mode != generate.PauseKeep || r.policy.Version() != 2 {
		t.Fatalf("restarted: paused %v (%s), version %d", paused, mode, r.policy.Version())
	}
	// Within its recorded lease the step not acknowledged stays leased
	// (its trainer may go on and acknowledge it); then it is to be served
	// again.
	if st := statusOf(r); st.Steps != (client.StepCounts{Made: 2, Acked: 1, Leased: 1}) || len(st.Leases) != 1 || st.Leases[0].Step != b {
		t.Fatalf("restarted within the lease: steps %+v, leases %+v", st.Steps, st.Leases)
	}
	rclock.advance(testLease)
	if st := statusOf(r); st.Steps != (client.StepCounts{Made: 2, Acked: 1, Pending: 1}) {
		t.Fatalf("restarted, past the lease: steps %+v", st.Steps)
	}
	// The groups of both steps are taken; the queue gets the others.
	for _, g := range testGroups(0, 4) {
		if !r.taken(g.ref) {
			t.Fatalf("restarted: %v not taken", g.ref)
		}
	}
	r.enqueue(testGroups(0, 6), nil)
	if st := statusOf(r); st.QueuedGroups != 2 {
		t.Fatalf("restarted: %d queued, want 2", st.QueuedGroups)
	}
	again, wasAgain := serveStep(t, r, 2)
	if again != b || !wasAgain {
		t.Fatalf("restarted: step %d (again %v), want %d again", again, wasAgain, b)
	}
	next, _ := serveStep(t, r, 2)
	if next != 3 {
		t.Fatalf("restarted: new step %d, want 3", next)
	}
}

// Trainers are served first come first served; one that goes away gives
// back what it was granted, to the head of the queue; when the run ends,
// a request that cannot be served is told so (errEnded).
func TestLedgerWaitCancelEnd(t *testing.T) {
	l, _, _ := newTestLedger(t, nil)
	first, second := l.wait(3, 0, 0), l.wait(1, 0, 0)
	l.enqueue(testGroups(0, 2), nil)
	select {
	case g := <-second.ch:
		t.Fatalf("the second request was served before the first: %+v", g)
	default:
	}
	l.enqueue(testGroups(2, 1), nil)
	g := granted(t, first)
	if len(g.fresh) != 3 {
		t.Fatalf("first: %d groups", len(g.fresh))
	}
	// The first goes away before taking its grant: the groups go back.
	l.mu.Lock()
	first.ch <- g
	l.mu.Unlock()
	l.cancel(first)
	g2 := granted(t, second)
	if len(g2.fresh) != 1 || g2.fresh[0].ref != (groupRef{0, 0}) {
		t.Fatalf("second: %+v, want task 0 (back at the head of the queue)", g2.fresh)
	}
	l.end(nil)
	g3 := granted(t, l.wait(5, 0, 0))
	if !errors.Is(g3.err, errEnded) {
		t.Fatalf("after the end: %v, want errEnded", g3.err)
	}
	if got := statusOf(l); got.QueuedGroups != 2 || got.Ended == "" || !slices.Equal(got.Waiting, []int{}) {
		t.Fatalf("status %+v", got)
	}
}

// A step to be served again goes to the next caller whatever K it asks,
// whole and under its number, before any fresh groups: after a restart,
// a trainer that changed its K still takes the steps left over.
func TestLedgerPendingAnyK(t *testing.T) {
	for _, k := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			l, clock, _ := newTestLedger(t, nil)
			l.enqueue(testGroups(0, 20), nil)
			first, _ := serveStep(t, l, 4)
			clock.advance(testLease)
			g := granted(t, l.wait(k, 0, 0))
			if g.step == nil || g.step.Step != first || len(g.step.Groups) != 4 {
				t.Fatalf("K=%d after the lease of a step of 4: %+v, want step %d again", k, g, first)
			}
			// The next request gets fresh groups, as many as it asks.
			g = granted(t, l.wait(k, 0, 0))
			if g.step != nil || len(g.fresh) != k {
				t.Fatalf("K=%d then: %+v, want %d fresh groups", k, g, k)
			}
		})
	}
}

// The standing demand follows the recent requests: serve.buffer_steps
// steps of the largest K of the last recentRequests requests, not of the
// largest ever asked.
func TestLedgerDemandFollowsRecent(t *testing.T) {
	supply := groups.NewSupply(0)
	l, err := newLedger(ledgerConfig{Persist: (&store{}).persist, Now: newFakeClock().now, Lease: testLease, Buffer: 1, Supply: supply})
	if err != nil {
		t.Fatal(err)
	}
	l.enqueue(testGroups(0, 200), nil)
	steps := []struct {
		k, times int
		want     int // the demand after them
	}{
		{16, 1, 16 + 16},       // in steps 16, a step of 16 ahead
		{2, 4, 24 + 16},        // 16 still among the recent
		{2, 4, 30 + 16},        // the 8th request's; then 16 leaves the recent, and the demand never falls
		{2, 20, 16 + 28*2 + 2}, // a step of 2 ahead (of 16, largest ever: 88)
		{4, 1, 76 + 4},         // a larger K counts at once
	}
	for i, s := range steps {
		for range s.times {
			serveStep(t, l, s.k)
		}
		if got := supply.Target(); got != s.want {
			t.Fatalf("after %d×%d (row %d): demand %d, want %d", s.times, s.k, i, got, s.want)
		}
	}
}

// The look-ahead: serve.buffer_steps steps of the recent K, at least the
// kept groups that keep generate.concurrency busy (Fill) while
// buffer_steps > 0, and under serve.max_staleness at least what the
// staleness bound allows at the current version (Bound), from before
// the first request and raised by each new version.
func TestLedgerLookAhead(t *testing.T) {
	tests := []struct {
		name         string
		buffer, fill int
		bound        *groups.Bound
		ks           []int  // the steps served, in order
		version      int64  // then the policy version posted (0: none)
		want         [3]int // the demand at the start, after the steps, after the version
	}{
		{name: "buffer alone", buffer: 1, ks: []int{8}, want: [3]int{0, 16, 16}},
		{name: "fill before the first request", buffer: 1, fill: 12, ks: []int{8}, want: [3]int{12, 8 + 12, 20}},
		{name: "steps larger than the fill", buffer: 2, fill: 12, ks: []int{8, 8}, want: [3]int{12, 16 + 16, 32}},
		{name: "buffer_steps 0: no look-ahead, no fill", buffer: 0, fill: 12, ks: []int{8}, want: [3]int{0, 8, 8}},
		{name: "the staleness bound", buffer: 1, fill: 4, bound: &groups.Bound{MaxStaleness: 1, StepGroups: 8}, ks: []int{8}, version: 1, want: [3]int{16, 16, 24}},
		{name: "bound below the look-ahead", buffer: 4, bound: &groups.Bound{MaxStaleness: 0, StepGroups: 2}, ks: []int{8}, version: 3, want: [3]int{2, 8 + 32, 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			supply := groups.NewSupply(0)
			l, err := newLedger(ledgerConfig{Persist: (&store{}).persist, Now: newFakeClock().now, Lease: testLease,
				Buffer: tt.buffer, Fill: tt.fill, Staleness: tt.bound, OnStale: groups.StaleKeep, Supply: supply})
			if err != nil {
				t.Fatal(err)
			}
			if got := supply.Target(); got != tt.want[0] {
				t.Fatalf("demand at the start %d, want %d", got, tt.want[0])
			}
			l.enqueue(testGroups(0, 100), nil)
			for _, k := range tt.ks {
				serveStep(t, l, k)
			}
			if got := supply.Target(); got != tt.want[1] {
				t.Fatalf("demand after steps %v: %d, want %d", tt.ks, got, tt.want[1])
			}
			if tt.version > 0 {
				if err := l.setVersion(tt.version); err != nil {
					t.Fatal(err)
				}
			}
			if got := supply.Target(); got != tt.want[2] {
				t.Fatalf("demand after version %d: %d, want %d", tt.version, got, tt.want[2])
			}
		})
	}
}

func TestFillGroups(t *testing.T) {
	for _, tt := range []struct{ conc, n, want int }{{64, 8, 8}, {65, 8, 9}, {512, 8, 64}, {4, 8, 1}, {16, 0, 0}} {
		if got := fillGroups(tt.conc, tt.n); got != tt.want {
			t.Errorf("fillGroups(%d, %d) = %d, want %d", tt.conc, tt.n, got, tt.want)
		}
	}
}

// A lease given on a step made before (a whole step served again, a
// rank's slice of a step another rank made) is recorded (recordLease):
// a ledger restarted from the state keeps it until it runs out, then
// serves the step (the slice) again; once acknowledged, never again.
func TestLedgerLeaseRecordedAcrossRestart(t *testing.T) {
	tests := []struct {
		name        string
		rank, world int
	}{
		{"a whole step served again", 0, 0},
		{"the slice of a rank that did not make the step", 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, clock, db := newTestLedger(t, nil)
			l.enqueue(testGroups(0, 4), nil)
			var n int64
			if tt.world == 0 {
				n, _ = serveStep(t, l, 2)
				clock.advance(testLease) // its first lease runs out
			} else {
				// Rank 0 makes the step (its lease is recorded with it).
				g := granted(t, l.wait(2, 0, tt.world))
				st := &stepState{Step: l.reserve(), World: tt.world, GroupTokens: []int64{1, 1}, GroupRows: []int{4, 4}}
				for _, gr := range g.fresh {
					st.Groups = append(st.Groups, gr.ref)
				}
				if err := l.recordStep(st); err != nil {
					t.Fatal(err)
				}
				n = st.Step
			}
			g := granted(t, l.wait(2, tt.rank, tt.world))
			if g.step == nil || g.step.Step != n {
				t.Fatalf("rank %d: %+v, want step %d", tt.rank, g, n)
			}
			if _, err := l.recordLease(g, tt.world); err != nil {
				t.Fatal(err)
			}
			leased := clock.now().Add(testLease)

			r, rclock, rdb := newTestLedger(t, db.last())
			rclock.advance(leased.Sub(rclock.now()) - time.Second)
			if g := r.wait(2, tt.rank, tt.world); len(g.ch) != 0 {
				t.Fatalf("restarted within the recorded lease: rank %d was served %+v", tt.rank, <-g.ch)
			} else {
				r.cancel(g)
			}
			rclock.advance(time.Second)
			g = granted(t, r.wait(2, tt.rank, tt.world))
			if g.step == nil || g.step.Step != n {
				t.Fatalf("restarted, past the lease: %+v, want step %d again", g, n)
			}
			if _, err := r.ack(n, tt.rank, tt.world, nil); err != nil {
				t.Fatal(err)
			}
			if tt.world > 0 {
				if _, err := r.ack(n, 0, tt.world, nil); err != nil {
					t.Fatal(err)
				}
			}
			a, aclock, _ := newTestLedger(t, rdb.last())
			aclock.advance(10 * testLease)
			if st := statusOf(a); st.Steps.Acked != 1 || st.Steps.Pending != 0 || st.Steps.Leased != 0 {
				t.Fatalf("acknowledged, restarted: steps %+v, want it never served again", st.Steps)
			}
		})
	}
}

// makeWorldStep makes a step of k fresh groups for rank of world (world
// 0: whole) as the handler does: its groups' tokens and rows recorded,
// its lease with it.
func makeWorldStep(t *testing.T, l *ledger, k, rank, world int) int64 {
	t.Helper()
	g := granted(t, l.wait(k, rank, world))
	if g.fresh == nil {
		t.Fatalf("rank %d of %d: %+v, want fresh groups", rank, world, g)
	}
	st := &stepState{Step: l.reserve(), World: world, LeasedRank: rank}
	for _, gr := range g.fresh {
		st.Groups = append(st.Groups, gr.ref)
		st.GroupTokens = append(st.GroupTokens, 1)
		st.GroupRows = append(st.GroupRows, gr.rows)
	}
	if err := l.recordStep(st); err != nil {
		t.Fatal(err)
	}
	return st.Step
}

// Whole-step callers and the ranks of a world do not strand each other:
// a step of one kind that no caller of its kind took back within a lease
// after its last lease ran out is stranded, and a caller of the other
// kind takes it (a whole caller a world's step none of whose slices was
// acknowledged, served whole; a rank a whole step, cut for its world, the
// world's other ranks then taking their slices); before that, each gets
// steps of its own kind. A world's step whose slices were partly
// acknowledged waits for its world.
func TestLedgerStrandedSteps(t *testing.T) {
	t.Run("a world's step to a whole-step caller", func(t *testing.T) {
		l, clock, _ := newTestLedger(t, nil)
		l.enqueue(testGroups(0, 8), nil)
		n := makeWorldStep(t, l, 2, 0, 2) // rank 1 never comes, rank 0 never acks
		clock.advance(testLease)
		if g := granted(t, l.wait(2, 0, 0)); g.step != nil {
			t.Fatalf("within a lease of the last one: a whole caller got step %d, want fresh groups", g.step.Step)
		}
		clock.advance(testLease)
		g := granted(t, l.wait(2, 0, 0))
		if g.step == nil || g.step.Step != n || g.rank != wholeRank {
			t.Fatalf("stranded: %+v, want step %d whole", g, n)
		}
		st, err := l.recordLease(g, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.World != 2 || st.RankLeases[wholeRank].IsZero() {
			t.Fatalf("recorded %+v, want world 2 leased whole", st)
		}
		if g := granted(t, l.wait(2, 1, 2)); g.step != nil {
			t.Fatalf("rank 1 got step %d while a whole caller holds step %d, want fresh groups", g.step.Step, n)
		}
		if _, err := l.ack(n, 0, 0, nil); err != nil {
			t.Fatal(err)
		}
		if s := statusOf(l); s.Steps.Acked != 1 || s.Steps.Pending != 0 {
			t.Fatalf("after the ack: %+v", s.Steps)
		}
	})
	t.Run("a whole step to the ranks of a world", func(t *testing.T) {
		l, clock, db := newTestLedger(t, nil)
		l.enqueue(testGroups(0, 4), nil)
		n := makeWorldStep(t, l, 4, 0, 0) // its trainer died; the job restarts as 2 ranks
		clock.advance(testLease)
		w0 := l.wait(2, 0, 2)
		if len(w0.ch) != 0 {
			t.Fatalf("within a lease of the last one: rank 0 got %+v", <-w0.ch)
		}
		clock.advance(testLease)
		l.tick()
		g0 := granted(t, w0)
		if g0.step == nil || g0.step.Step != n {
			t.Fatalf("stranded: rank 0 got %+v, want step %d", g0, n)
		}
		g1 := granted(t, l.wait(2, 1, 2)) // while the cut is being recorded
		if g1.step == nil || g1.step.Step != n {
			t.Fatalf("rank 1 got %+v, want its slice of step %d", g1, n)
		}
		for _, g := range []grant{g0, g1} {
			st, err := l.recordLease(g, 2)
			if err != nil {
				t.Fatal(err)
			}
			if st.World != 2 || st.RankLeases[g.rank].IsZero() {
				t.Fatalf("recorded %+v, want step %d cut for 2 ranks, rank %d leased", st, n, g.rank)
			}
		}
		// A restart keeps the cut and both leases.
		r, rclock, _ := newTestLedger(t, db.last())
		rclock.advance(clock.now().Sub(rclock.now()))
		if s := statusOf(r); s.Steps.Leased != 1 || len(s.Leases) != 2 {
			t.Fatalf("restarted: steps %+v, leases %+v", s.Steps, s.Leases)
		}
		for rank := range 2 {
			if _, err := l.ack(n, rank, 2, nil); err != nil {
				t.Fatal(err)
			}
		}
		if s := statusOf(l); s.Steps.Acked != 1 {
			t.Fatalf("after both ranks' acks: %+v", s.Steps)
		}
	})
	t.Run("a world's step partly acknowledged, within a lease, waits for its world", func(t *testing.T) {
		l, clock, _ := newTestLedger(t, nil)
		l.enqueue(testGroups(0, 8), nil)
		n := makeWorldStep(t, l, 2, 0, 2)
		if _, err := l.ack(n, 0, 2, nil); err != nil {
			t.Fatal(err)
		}
		clock.advance(testLease)
		if g := granted(t, l.wait(1, 0, 0)); g.step != nil {
			t.Fatalf("within a lease of the last one: a whole caller got step %d, half trained on", g.step.Step)
		}
		if g := granted(t, l.wait(2, 1, 2)); g.step == nil || g.step.Step != n {
			t.Fatalf("rank 1 got %+v, want its slice of step %d", g, n)
		}
	})
}

// partlyAckedStep makes a step of 8 groups of tokens 8, 7, …, 1 (tasks 0
// to 7) for a world of 4 ranks, whose ranks 0 and 1 acknowledge their
// slices (tasks 0 and 7, 1 and 6: partition) and ranks 2 and 3 never
// come; the clock is then past the step's last lease by a lease: it is
// stranded, its remainder tasks 2 to 5.
func partlyAckedStep(t *testing.T, l *ledger, clock *fakeClock) int64 {
	t.Helper()
	gs := testGroups(0, 8)
	for i, g := range gs {
		g.tokens = int64(8 - i)
	}
	l.enqueue(gs, nil)
	g := granted(t, l.wait(8, 0, 4))
	st := &stepState{Step: l.reserve(), World: 4}
	for _, gr := range g.fresh {
		st.Groups = append(st.Groups, gr.ref)
		st.Rows += gr.rows
		st.GroupTokens = append(st.GroupTokens, gr.tokens)
		st.GroupRows = append(st.GroupRows, gr.rows)
	}
	if err := l.recordStep(st); err != nil {
		t.Fatal(err)
	}
	g1 := granted(t, l.wait(8, 1, 4))
	if g1.step == nil || g1.step.Step != st.Step {
		t.Fatalf("rank 1 of 4 got %+v, want its slice of step %d", g1, st.Step)
	}
	if _, err := l.recordLease(g1, 4); err != nil {
		t.Fatal(err)
	}
	for rank := range 2 {
		if _, err := l.ack(st.Step, rank, 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(2 * testLease)
	return st.Step
}

// tasksOf is the tasks of refs.
func tasksOf(refs []groupRef) []int64 {
	out := []int64{}
	for _, r := range refs {
		out = append(out, r[0])
	}
	return out
}

// sliceTasks is the tasks of rank's slice of st as its world's ranks are
// served it.
func sliceTasks(st *stepState, rank int) []int64 {
	var refs []groupRef
	for _, i := range partition(st.GroupTokens, st.World)[rank] {
		refs = append(refs, st.Groups[i])
	}
	return tasksOf(refs)
}

// A stranded step of a world some ranks acknowledged goes to a caller of
// another kind with only the groups of the slices not acknowledged: cut
// for the ranks of another world (by the same greedy token cut), or
// whole to a whole-step caller, under its number; the groups trained on
// are recorded (Trained) and never served again, a restart included, and
// the acks of its new shape complete it.
func TestLedgerStrandedPartlyAcked(t *testing.T) {
	t.Run("to the ranks of another world", func(t *testing.T) {
		l, clock, db := newTestLedger(t, nil)
		n := partlyAckedStep(t, l, clock)
		g0 := granted(t, l.wait(4, 0, 2))
		if g0.step == nil || g0.step.Step != n {
			t.Fatalf("stranded: rank 0 of 2 got %+v, want step %d", g0, n)
		}
		st, err := l.recordLease(g0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := tasksOf(st.Groups); st.World != 2 || !slices.Equal(got, []int64{2, 3, 4, 5}) || st.Rows != 16 || len(st.RanksAcked) != 0 {
			t.Fatalf("recorded world %d, groups of tasks %v, %d rows, ranks acked %v; want world 2, tasks [2 3 4 5], 16 rows, none acked",
				st.World, got, st.Rows, st.RanksAcked)
		}
		if got := tasksOf(st.Trained); !slices.Equal(got, []int64{0, 1, 6, 7}) {
			t.Fatalf("trained: tasks %v, want [0 1 6 7]", got)
		}
		// Tokens 6, 5, 4, 3: the greedy cut for 2.
		if a, b := sliceTasks(st, 0), sliceTasks(st, 1); !slices.Equal(a, []int64{2, 5}) || !slices.Equal(b, []int64{3, 4}) {
			t.Fatalf("slices %v and %v, want [2 5] and [3 4]", a, b)
		}
		if _, err := l.ack(n, 2, 4, nil); !errors.Is(err, errWorld) {
			t.Fatalf("an ack from the old world: %v, want %v", err, errWorld)
		}

		// A restart (kill -9) in the middle keeps the cut, and the
		// groups trained on stay taken: never queued again.
		r, rclock, rdb := newTestLedger(t, db.last())
		rclock.advance(clock.now().Sub(rclock.now()))
		rst := r.steps[n]
		if a, b := sliceTasks(rst, 0), sliceTasks(rst, 1); rst.World != 2 || !slices.Equal(a, []int64{2, 5}) || !slices.Equal(b, []int64{3, 4}) {
			t.Fatalf("restarted: world %d, slices %v and %v; want world 2, [2 5] and [3 4]", rst.World, a, b)
		}
		for task := range 8 {
			if !r.taken(groupRef{int64(task), 0}) {
				t.Fatalf("restarted: task %d is not taken; it would be queued and served again", task)
			}
		}
		if g := r.wait(4, 0, 2); len(g.ch) != 0 {
			t.Fatalf("restarted within rank 0's lease: rank 0 got %+v", <-g.ch)
		} else {
			r.cancel(g)
		}
		g1 := granted(t, r.wait(4, 1, 2))
		if g1.step == nil || g1.step.Step != n {
			t.Fatalf("restarted: rank 1 of 2 got %+v, want its slice of step %d", g1, n)
		}
		if st, err := r.recordLease(g1, 2); err != nil || st.World != 2 || len(st.Groups) != 4 {
			t.Fatalf("rank 1's lease: %+v, %v", st, err)
		}
		for rank := range 2 {
			if _, err := r.ack(n, rank, 2, nil); err != nil {
				t.Fatal(err)
			}
		}
		a, _, _ := newTestLedger(t, rdb.last())
		if s := statusOf(a); s.Steps.Acked != 1 || s.Steps.Pending != 0 || s.Steps.Leased != 0 {
			t.Fatalf("both ranks of 2 acknowledged, restarted: steps %+v, want step %d complete", s.Steps, n)
		}
	})
	t.Run("whole to a whole-step caller", func(t *testing.T) {
		l, clock, db := newTestLedger(t, nil)
		n := partlyAckedStep(t, l, clock)
		g := granted(t, l.wait(8, 0, 0))
		if g.step == nil || g.step.Step != n || g.rank != wholeRank {
			t.Fatalf("stranded: a whole caller got %+v, want step %d", g, n)
		}
		st, err := l.recordLease(g, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := tasksOf(st.Groups); st.World != 0 || !slices.Equal(got, []int64{2, 3, 4, 5}) || st.Rows != 16 || st.LeasedUntil.IsZero() {
			t.Fatalf("recorded world %d, groups of tasks %v, %d rows, leased until %v; want a whole step of tasks [2 3 4 5], 16 rows, leased",
				st.World, got, st.Rows, st.LeasedUntil)
		}
		if got := tasksOf(st.Trained); !slices.Equal(got, []int64{0, 1, 6, 7}) {
			t.Fatalf("trained: tasks %v, want [0 1 6 7]", got)
		}
		if w := l.wait(2, 2, 4); len(w.ch) != 0 {
			t.Fatalf("rank 2 of the old world got %+v while a whole caller holds step %d", <-w.ch, n)
		} else {
			l.cancel(w)
		}

		r, rclock, rdb := newTestLedger(t, db.last())
		rclock.advance(clock.now().Sub(rclock.now()))
		if s := statusOf(r); s.Steps.Leased != 1 || len(s.Leases) != 1 || s.Leases[0].Step != n {
			t.Fatalf("restarted: steps %+v, leases %+v; want step %d leased", s.Steps, s.Leases, n)
		}
		if got := tasksOf(r.steps[n].Groups); !slices.Equal(got, []int64{2, 3, 4, 5}) {
			t.Fatalf("restarted: tasks %v, want [2 3 4 5]", got)
		}
		if _, err := r.ack(n, 0, 0, nil); err != nil {
			t.Fatal(err)
		}
		a, _, _ := newTestLedger(t, rdb.last())
		if s := statusOf(a); s.Steps.Acked != 1 || s.Steps.Pending != 0 {
			t.Fatalf("acknowledged, restarted: steps %+v", s.Steps)
		}
	})
	t.Run("an old world's ack while the remainder is being cut", func(t *testing.T) {
		l, clock, _ := newTestLedger(t, nil)
		n := partlyAckedStep(t, l, clock)
		g0 := granted(t, l.wait(4, 0, 2))
		if g0.step == nil || g0.step.Step != n {
			t.Fatalf("stranded: rank 0 of 2 got %+v, want step %d", g0, n)
		}
		if _, err := l.ack(n, 2, 4, nil); !errors.Is(err, errWorld) {
			t.Fatalf("rank 2 of 4's ack while the step is cut for 2: %v, want %v", err, errWorld)
		}
		st, err := l.recordLease(g0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := tasksOf(st.Groups); !slices.Equal(got, []int64{2, 3, 4, 5}) {
			t.Fatalf("recorded tasks %v, want [2 3 4 5]", got)
		}
	})
	t.Run("a remainder of fewer groups than a world's ranks", func(t *testing.T) {
		l, clock, _ := newTestLedger(t, nil)
		l.enqueue(testGroups(100, 8), nil) // fresh groups for the ranks of 5
		n := partlyAckedStep(t, l, clock)
		if g := granted(t, l.wait(5, 0, 5)); g.step != nil {
			t.Fatalf("rank 0 of 5 got step %d of 4 groups left", g.step.Step)
		}
		if g := granted(t, l.wait(4, 0, 0)); g.step == nil || g.step.Step != n {
			t.Fatalf("a whole caller got %+v, want step %d", g, n)
		}
	})
}
