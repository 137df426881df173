package serve

import (
	"errors"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// versioned returns groups of tasks from, from+1, … (attempt 0) whose
// oldest tokens are of the versions given, one group a version.
func versioned(from int, versions ...int64) []*group {
	out := make([]*group, len(versions))
	for i, v := range versions {
		out[i] = &group{ref: groupRef{int64(from + i), 0}, rows: 4, versions: []int64{v}}
	}
	return out
}

// refsOf is the groups' refs, in order.
func refsOf(gs []*group) []groupRef {
	var out []groupRef
	for _, g := range gs {
		out = append(out, g.ref)
	}
	return out
}

// stepOf asks for a step of k groups and records it; it returns the
// groups made into the step (nil when the request waits).
func stepOf(t *testing.T, l *ledger, k int) []groupRef {
	t.Helper()
	w := l.wait(k, 0, 0)
	select {
	case g := <-w.ch:
		if g.err != nil || g.step != nil {
			t.Fatalf("granted %+v, want fresh groups", g)
		}
		st := &stepState{Step: l.reserve(), Groups: refsOf(g.fresh)}
		if err := l.recordStep(st); err != nil {
			t.Fatal(err)
		}
		return st.Groups
	default:
		l.cancel(w)
		return nil
	}
}

// serve.max_staleness holds where the trainer sees it: when a step is
// made, a queued group whose oldest token is more than max_staleness
// versions behind the policy is not served (on_stale requeue or drop: the
// state records it as stale, the gate gets its place back, the demand
// counts it) or served (keep); the oldest groups go first.
func TestLedgerStaleAtHandOut(t *testing.T) {
	for _, tt := range []struct {
		name    string
		bound   *groups.Bound
		onStale string
		queue   []int64 // the queued groups' oldest versions, tasks 0, 1, …
		version int64   // the policy version when the step is asked for
		k       int
		want    []groupRef // the step's groups (nil: the request waits)
		stale   []groupRef // recorded as stale
	}{
		{"within the bound: served oldest first", &groups.Bound{MaxStaleness: 1}, groups.StaleRequeue, []int64{2, 1, 2, 1}, 2, 2,
			[]groupRef{{1, 0}, {3, 0}}, nil},
		{"requeue: a group two versions old is not served", &groups.Bound{MaxStaleness: 1}, groups.StaleRequeue, []int64{2, 0, 1, 2}, 2, 2,
			[]groupRef{{2, 0}, {0, 0}}, []groupRef{{1, 0}}},
		{"drop: the same", &groups.Bound{MaxStaleness: 1}, groups.StaleDrop, []int64{0, 2, 2}, 2, 2,
			[]groupRef{{1, 0}, {2, 0}}, []groupRef{{0, 0}}},
		{"keep: served, oldest first", &groups.Bound{MaxStaleness: 1}, groups.StaleKeep, []int64{2, 0, 2}, 2, 2,
			[]groupRef{{1, 0}, {0, 0}}, nil},
		{"max_staleness 0: only the current version", &groups.Bound{MaxStaleness: 0}, groups.StaleDrop, []int64{1, 2, 2, 0}, 2, 2,
			[]groupRef{{1, 0}, {2, 0}}, []groupRef{{0, 0}, {3, 0}}},
		{"too few fresh groups left: the request waits", &groups.Bound{MaxStaleness: 1}, groups.StaleDrop, []int64{0, 0, 2}, 2, 2,
			nil, []groupRef{{0, 0}, {1, 0}}},
		{"no bound: served oldest first", nil, "", []int64{3, 0, 1}, 3, 2,
			[]groupRef{{1, 0}, {2, 0}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := &store{}
			supply := groups.NewSupply(0)
			cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: tt.bound, OnStale: tt.onStale, Supply: supply}
			l, err := newLedger(cfg)
			if err != nil {
				t.Fatal(err)
			}
			discarded := 0
			l.setDiscard(func(n int) { discarded += n })
			if err := l.setVersion(tt.version); err != nil {
				t.Fatal(err)
			}
			l.enqueue(versioned(0, tt.queue...), nil)
			got := stepOf(t, l, tt.k)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("step of %v", got)
			}
			if discarded != len(tt.stale) {
				t.Fatalf("the gate was given back %d places, want %d", discarded, len(tt.stale))
			}
			if st := statusOf(l); st.StaleGroups != len(tt.stale) {
				t.Fatalf("status stale_groups %d, want %d", st.StaleGroups, len(tt.stale))
			}
			if got := supply.Target(); got < len(tt.want)+len(tt.stale) {
				t.Fatalf("demand %d counts neither the step nor the stale groups", got)
			}
			if tt.want == nil {
				// Recorded with the next change the state file records.
				if err := l.setVersion(tt.version + 1); err != nil {
					t.Fatal(err)
				}
			}
			var recorded []groupRef
			if last := db.last(); last != nil {
				recorded = last.Stale
			}
			if !slices.Equal(recorded, tt.stale) {
				t.Fatalf("the state records %v as stale, want %v", recorded, tt.stale)
			}

			// A restart from the recorded state reads the same data
			// files again: nothing served or stale is queued again.
			r, err := newLedger(ledgerConfig{State: db.last(), Persist: (&store{}).persist, Now: newFakeClock().now, Lease: testLease, Staleness: tt.bound, OnStale: tt.onStale})
			if err != nil {
				t.Fatal(err)
			}
			r.enqueue(versioned(0, tt.queue...), nil)
			var again []groupRef
			for _, g := range r.queue {
				again = append(again, g.ref)
			}
			for _, g := range again {
				if slices.Contains(tt.want, g) || slices.Contains(tt.stale, g) {
					t.Fatalf("after a restart %v is queued again", g)
				}
			}
		})
	}
}

// A crash after groups were found stale and before any record: the
// restarted ledger, over the state before, finds them stale again (the
// version it records only grows), so none is ever served.
func TestLedgerStaleCrashBeforeRecord(t *testing.T) {
	db := &store{}
	cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: groups.StaleDrop}
	l, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.setVersion(3); err != nil {
		t.Fatal(err)
	}
	l.enqueue(versioned(0, 1, 3), nil) // task 0 is two versions behind
	if got := stepOf(t, l, 2); got != nil {
		t.Fatalf("step of %v, want the request to wait", got)
	}
	crashed := db.last() // the state at the crash: no stale group recorded
	if len(crashed.Stale) != 0 {
		t.Fatalf("recorded %v without a change", crashed.Stale)
	}
	cfg.State, cfg.Persist = crashed, (&store{}).persist
	r, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.enqueue(versioned(0, 1, 3, 3), nil)
	if got := stepOf(t, r, 2); !slices.Equal(got, []groupRef{{1, 0}, {2, 0}}) {
		t.Fatalf("after the restart a step of %v", got)
	}
}

// heldRun is a run's side of groups.Unserved for a ledger test: it holds
// the tasks of the groups it queues and records the jobs it is handed.
type heldRun struct {
	u    *groups.Unserved
	jobs []groups.Job
}

func newHeldRun() *heldRun {
	h := &heldRun{u: groups.NewUnserved()}
	h.u.Bind(func(j groups.Job) { h.jobs = append(h.jobs, j) })
	return h
}

// hold holds the tasks of gs, as the run does when it keeps them.
func (h *heldRun) hold(gs []*group) []*group {
	for _, g := range gs {
		h.u.Hold(&pipeline.Task{Index: g.ref[0]}, int(g.ref[1]), false)
	}
	return gs
}

// again is the groups the run was told to sample, as refs.
func (h *heldRun) again() []groupRef {
	var out []groupRef
	for _, j := range h.jobs {
		out = append(out, groupRef{j.Task.Index, int64(j.Attempt)})
	}
	return out
}

// A group found stale at hand-out under on_stale requeue has its task
// sampled again, once, in the next attempt, as soon as the state records
// it stale (not before: a crash first finds it stale again); under drop
// it is not. The groups handed out are held no more.
func TestLedgerStaleRequeuesTask(t *testing.T) {
	for _, tt := range []struct {
		onStale string
		want    []groupRef
	}{
		{groups.StaleRequeue, []groupRef{{1, 1}}},
		{groups.StaleDrop, nil},
	} {
		t.Run(tt.onStale, func(t *testing.T) {
			db := &store{}
			run := newHeldRun()
			l, err := newLedger(ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: tt.onStale, Unserved: run.u})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.setVersion(2); err != nil {
				t.Fatal(err)
			}
			// Task 1 is two versions behind; the request waits for a
			// third fresh group.
			l.enqueue(run.hold(versioned(0, 2, 0, 1)), nil)
			if got := stepOf(t, l, 3); got != nil {
				t.Fatalf("step of %v, want the request to wait", got)
			}
			if len(run.jobs) != 0 {
				t.Fatalf("sampled %v again before the state recorded it stale", run.again())
			}
			db.fail = errors.New("disk full")
			if err := l.recordStale(); err == nil {
				t.Fatal("a failed record of the stale groups reported no error")
			}
			if len(run.jobs) != 0 {
				t.Fatalf("sampled %v again although the state could not record it stale", run.again())
			}
			db.fail = nil
			if err := l.recordStale(); err != nil {
				t.Fatal(err)
			}
			if err := l.recordStale(); err != nil { // nothing left to record
				t.Fatal(err)
			}
			if !slices.Equal(db.last().Stale, []groupRef{{1, 0}}) {
				t.Fatalf("the state records %v as stale", db.last().Stale)
			}
			if !slices.Equal(run.again(), tt.want) {
				t.Fatalf("sampled again %v, want %v", run.again(), tt.want)
			}
			if st := statusOf(l); st.RequeuedGroups != len(tt.want) || st.StaleGroups != 1 {
				t.Fatalf("status requeued_groups %d, stale_groups %d; want %d and 1", st.RequeuedGroups, st.StaleGroups, len(tt.want))
			}
			l.enqueue(run.hold(versioned(3, 2)), nil)
			if got := stepOf(t, l, 3); len(got) != 3 {
				t.Fatalf("step of %v, want 3 groups", got)
			}
			if !slices.Equal(run.again(), tt.want) {
				t.Fatalf("after a step, sampled again %v, want %v", run.again(), tt.want)
			}
			if tt.onStale == groups.StaleRequeue && run.u.Holding() != 0 {
				t.Fatalf("%d tasks held after every group was handed out or set aside", run.u.Holding())
			}
		})
	}
}

// A crash between the state recording a group stale and its new attempt
// being committed: the restarted ledger, over the recorded state, has
// the task sampled again exactly once as the resumed run reads it, and
// never again, however often the data files are read or the state
// recorded; where the new attempt was committed before the crash, the
// run settles it and it is not sampled again.
func TestLedgerStaleRequeueAcrossRestart(t *testing.T) {
	db := &store{}
	run := newHeldRun()
	cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: groups.StaleRequeue, Unserved: run.u}
	l, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.setVersion(3); err != nil {
		t.Fatal(err)
	}
	l.enqueue(run.hold(versioned(0, 1, 1, 3)), nil) // tasks 0 and 1 are two versions behind
	if err := l.recordStale(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(run.again(), []groupRef{{0, 1}, {1, 1}}) {
		t.Fatalf("before the crash sampled again %v", run.again())
	}
	// The crash: task 0's new attempt never finished, task 1's was
	// committed (not kept) before it.
	restarted := newHeldRun()
	cfg.State, cfg.Persist, cfg.Unserved = db.last(), (&store{}).persist, restarted.u
	r, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.enqueue(versioned(0, 1, 1, 3), nil) // the data files read again
	if !restarted.u.Resumed(&pipeline.Task{Index: 0}, 0) {
		t.Fatal("task 0, recorded stale, not sampled again after the restart")
	}
	if !restarted.u.Settle(pipeline.GroupKey{TaskIndex: 1, Attempt: 0}) {
		t.Fatal("task 1's new attempt, committed, not settled")
	}
	if err := r.setVersion(4); err != nil {
		t.Fatal(err)
	}
	if err := r.recordStale(); err != nil {
		t.Fatal(err)
	}
	if restarted.u.Resumed(&pipeline.Task{Index: 0}, 0) || restarted.u.Resumed(&pipeline.Task{Index: 1}, 0) {
		t.Fatal("a task sampled again twice after the restart")
	}
	if len(restarted.jobs) != 0 {
		t.Fatalf("after the restart the ledger requeued %v again", restarted.again())
	}
	if st := statusOf(r); st.RequeuedGroups != 1 || st.StaleGroups != 2 {
		t.Fatalf("status requeued_groups %d, stale_groups %d; want 1 (task 0, since the restart) and 2", st.RequeuedGroups, st.StaleGroups)
	}
}

// A crash after groups were found stale and before any record, under
// requeue: nothing was sampled again; the restarted ledger finds them
// stale again and has each task sampled again once it records them.
func TestLedgerStaleRequeueCrashBeforeRecord(t *testing.T) {
	db := &store{}
	run := newHeldRun()
	cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: groups.StaleRequeue, Unserved: run.u}
	l, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.setVersion(3); err != nil {
		t.Fatal(err)
	}
	l.enqueue(run.hold(versioned(0, 1, 3)), nil)
	if got := stepOf(t, l, 2); got != nil {
		t.Fatalf("step of %v, want the request to wait", got)
	}
	if len(run.jobs) != 0 || len(db.last().Stale) != 0 {
		t.Fatalf("before any record: sampled again %v, recorded %v", run.again(), db.last().Stale)
	}
	restarted := newHeldRun()
	cfg.State, cfg.Persist, cfg.Unserved = db.last(), (&store{}).persist, restarted.u
	r, err := newLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The resumed run reads task 0 before the ledger records it stale:
	// it holds its task, unrendered.
	r.enqueue(versioned(0, 1, 3), nil)
	if restarted.u.Resumed(&pipeline.Task{Index: 0}, 0) {
		t.Fatal("task 0 sampled again before it was recorded stale")
	}
	if err := r.recordStale(); err != nil {
		t.Fatal(err)
	}
	if err := r.recordStale(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(restarted.again(), []groupRef{{0, 1}}) || !restarted.jobs[0].Fresh {
		t.Fatalf("after the restart sampled again %v (fresh: the task read, never rendered), want task 0 attempt 1 once", restarted.jobs)
	}
}
