package serve

import (
	"slices"
	"testing"

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
		name     string
		maxStale *int
		onStale  string
		queue    []int64 // the queued groups' oldest versions, tasks 0, 1, …
		version  int64   // the policy version when the step is asked for
		k        int
		want     []groupRef // the step's groups (nil: the request waits)
		stale    []groupRef // recorded as stale
	}{
		{"within the bound: served oldest first", ptr(1), groups.StaleRequeue, []int64{2, 1, 2, 1}, 2, 2,
			[]groupRef{{1, 0}, {3, 0}}, nil},
		{"requeue: a group two versions old is not served", ptr(1), groups.StaleRequeue, []int64{2, 0, 1, 2}, 2, 2,
			[]groupRef{{2, 0}, {0, 0}}, []groupRef{{1, 0}}},
		{"drop: the same", ptr(1), groups.StaleDrop, []int64{0, 2, 2}, 2, 2,
			[]groupRef{{1, 0}, {2, 0}}, []groupRef{{0, 0}}},
		{"keep: served, oldest first", ptr(1), groups.StaleKeep, []int64{2, 0, 2}, 2, 2,
			[]groupRef{{1, 0}, {0, 0}}, nil},
		{"max_staleness 0: only the current version", ptr(0), groups.StaleDrop, []int64{1, 2, 2, 0}, 2, 2,
			[]groupRef{{1, 0}, {2, 0}}, []groupRef{{0, 0}, {3, 0}}},
		{"too few fresh groups left: the request waits", ptr(1), groups.StaleDrop, []int64{0, 0, 2}, 2, 2,
			nil, []groupRef{{0, 0}, {1, 0}}},
		{"no bound: served oldest first", nil, "", []int64{3, 0, 1}, 3, 2,
			[]groupRef{{1, 0}, {2, 0}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := &store{}
			supply := groups.NewSupply(0)
			cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, MaxStaleness: tt.maxStale, OnStale: tt.onStale, Supply: supply}
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
			r, err := newLedger(ledgerConfig{State: db.last(), Persist: (&store{}).persist, Now: newFakeClock().now, Lease: testLease, MaxStaleness: tt.maxStale, OnStale: tt.onStale})
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
	cfg := ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, MaxStaleness: ptr(1), OnStale: groups.StaleDrop}
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

func ptr[T any](v T) *T { return &v }
