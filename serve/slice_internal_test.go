package serve

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/stages/groups"
)

// partition cuts whole groups into world slices balanced by tokens, the
// same way every time: every group in exactly one slice, in step order,
// and no slice heavier than the lightest by more than the heaviest group.
func TestPartition(t *testing.T) {
	for _, tc := range []struct {
		tokens []int64
		world  int
		want   [][]int // nil: check the properties alone
	}{
		{[]int64{9, 1, 5, 5}, 2, [][]int{{0, 1}, {2, 3}}},
		{[]int64{1, 1, 1, 1}, 4, [][]int{{0}, {1}, {2}, {3}}},
		{[]int64{1, 2, 3}, 1, [][]int{{0, 1, 2}}},
		{[]int64{5, 5, 5, 5, 5, 5}, 3, [][]int{{0, 3}, {1, 4}, {2, 5}}},
		{[]int64{100, 1, 1, 1, 1}, 2, [][]int{{0}, {1, 2, 3, 4}}},
		{[]int64{0, 0, 0}, 2, nil},
		{[]int64{7, 3, 9, 12, 1, 4, 4, 8, 2, 6, 5, 11}, 4, nil},
	} {
		t.Run(fmt.Sprint(tc.tokens, tc.world), func(t *testing.T) {
			got := partition(tc.tokens, tc.world)
			if tc.want != nil && !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			if again := partition(tc.tokens, tc.world); !slices.EqualFunc(got, again, slices.Equal) {
				t.Fatalf("not the same twice: %v, %v", got, again)
			}
			seen := map[int]bool{}
			var loads []int64
			for _, s := range got {
				if !slices.IsSorted(s) {
					t.Fatalf("slice %v not in step order", s)
				}
				var load int64
				for _, g := range s {
					if seen[g] {
						t.Fatalf("group %d in two slices: %v", g, got)
					}
					seen[g] = true
					load += tc.tokens[g]
				}
				loads = append(loads, load)
			}
			if len(seen) != len(tc.tokens) || len(got) != tc.world {
				t.Fatalf("%v: %d groups in %d slices", got, len(seen), len(got))
			}
			if spread := slices.Max(loads) - slices.Min(loads); spread > slices.Max(tc.tokens) {
				t.Fatalf("loads %v: spread %d over the heaviest group", loads, spread)
			}
		})
	}
}

// The ranks of a world share one step: the first to ask makes it, each
// other rank gets the same step (its slice); the step is acknowledged
// once every rank acknowledged its slice, and only then does a rank get
// a new step. A rank's slice whose lease ran out goes to that rank again;
// an ack with another world is errWorld.
func TestLedgerRanks(t *testing.T) {
	l, clock, _ := newTestLedger(t, nil)
	l.enqueue(testGroups(0, 20), nil)
	take := func(rank int) (int64, bool) {
		t.Helper()
		g := granted(t, l.wait(4, rank, 2))
		if g.err != nil {
			t.Fatal(g.err)
		}
		if g.step != nil {
			return g.step.Step, true
		}
		st := &stepState{Step: l.reserve(), World: 2, LeasedRank: rank}
		for _, gr := range g.fresh {
			st.Groups = append(st.Groups, gr.ref)
			st.GroupTokens = append(st.GroupTokens, 1)
			st.GroupRows = append(st.GroupRows, gr.rows)
		}
		if err := l.recordStep(st); err != nil {
			t.Fatal(err)
		}
		return st.Step, false
	}
	n0, old0 := take(0)
	n1, old1 := take(1)
	if n0 != 1 || old0 || n1 != 1 || !old1 {
		t.Fatalf("ranks 0 and 1: steps %d (made %v), %d (shared %v); want step 1 made by rank 0, shared with rank 1", n0, !old0, n1, old1)
	}
	if st := statusOf(l); st.Steps.Leased != 1 || len(st.Leases) != 2 || *st.Leases[0].Rank != 0 || *st.Leases[1].Rank != 1 {
		t.Fatalf("status: %+v, leases %+v", st.Steps, st.Leases)
	}
	if _, err := l.ack(1, 0, 3); !errors.Is(err, errWorld) {
		t.Fatalf("ack with world 3: %v, want errWorld", err)
	}
	st, err := l.ack(1, 0, 2)
	if err != nil || st.Acked {
		t.Fatalf("rank 0's ack: %+v, %v; want the step not yet complete", st, err)
	}
	// Rank 1's lease runs out: its slice goes to rank 1 again, not to
	// rank 0, which gets a new step.
	clock.advance(testLease)
	if n, again := take(1); n != 1 || !again {
		t.Fatalf("rank 1 after its lease: step %d (again %v), want step 1", n, again)
	}
	if n, again := take(0); n != 2 || again {
		t.Fatalf("rank 0 after its ack: step %d (again %v), want the new step 2", n, again)
	}
	if st, err = l.ack(1, 1, 2); err != nil || !st.Acked || !slices.Equal(st.RanksAcked, []int{0, 1}) {
		t.Fatalf("rank 1's ack: %+v, %v; want step 1 complete", st, err)
	}
	if s := statusOf(l); s.Steps.Acked != 1 || s.Acked != 1 || s.LastAckedStep != 1 {
		t.Fatalf("status %+v", s)
	}
	// An ack without a rank completes a step of a world at once.
	if st, err = l.ack(2, 0, 0); err != nil || !st.Acked {
		t.Fatalf("step 2 acked whole: %+v, %v", st, err)
	}
}

// Ranks of one world asking at once share one step: while the first
// rank's step is being made, the others wait for it rather than take
// groups of their own; a step that could not be made lets the next rank
// make one.
func TestLedgerRanksAtOnce(t *testing.T) {
	l, _, _ := newTestLedger(t, nil)
	l.enqueue(testGroups(0, 20), nil)
	w0, w1, w2 := l.wait(4, 0, 3), l.wait(4, 1, 3), l.wait(4, 2, 3)
	g0 := granted(t, w0)
	if len(g0.fresh) != 4 {
		t.Fatalf("rank 0: %+v, want 4 fresh groups", g0)
	}
	select {
	case g := <-w1.ch:
		t.Fatalf("rank 1 served while rank 0's step is being made: %+v", g)
	default:
	}
	// Rank 0's step could not be made: rank 1 makes one.
	l.unmade(g0.fresh, 3)
	g1 := granted(t, w1)
	if len(g1.fresh) != 4 {
		t.Fatalf("rank 1 after the failure: %+v, want 4 fresh groups", g1)
	}
	st := &stepState{Step: l.reserve(), World: 3, LeasedRank: 1}
	for _, gr := range g1.fresh {
		st.Groups = append(st.Groups, gr.ref)
		st.GroupTokens = append(st.GroupTokens, 1)
		st.GroupRows = append(st.GroupRows, gr.rows)
	}
	if err := l.recordStep(st); err != nil {
		t.Fatal(err)
	}
	if g := granted(t, w2); g.step == nil || g.step.Step != st.Step {
		t.Fatalf("rank 2: %+v, want its slice of step %d", g, st.Step)
	}
	if g := granted(t, l.wait(4, 0, 3)); g.step == nil || g.step.Step != st.Step {
		t.Fatalf("rank 0 again: %+v, want its slice of step %d", g, st.Step)
	}
}

// The ranks of a world waiting for one step count once in the demand.
func TestLedgerRanksDemand(t *testing.T) {
	supply := groups.NewSupply(0)
	l, err := newLedger(ledgerConfig{Persist: (&store{}).persist, Now: newFakeClock().now, Lease: testLease, Supply: supply})
	if err != nil {
		t.Fatal(err)
	}
	for rank := range 4 {
		l.wait(8, rank, 4)
	}
	if got := supply.Target(); got != 8 {
		t.Fatalf("4 ranks waiting for a step of 8: demand %d, want 8", got)
	}
	l.wait(2, 0, 0)
	if got := supply.Target(); got != 10 {
		t.Fatalf("and a whole step of 2: demand %d, want 10", got)
	}
}
