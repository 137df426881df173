package harness

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// hedgeGroup is a group of one single-turn trajectory per length,
// correct where ok says, kept when the verdicts are not all equal.
func hedgeGroup(task int64, lens []int, ok []bool) OracleGroup {
	g := OracleGroup{Task: task}
	for i, d := range lens {
		g.Trajs = append(g.Trajs, &Traj{TaskIndex: task, Turns: []Turn{{Prompt: 3, Decode: d}}, Correct: ok[i]})
		g.Kept = g.Kept || ok[i] != ok[0]
	}
	return g
}

// hedgePolicies are one policy of each kind HedgeModel models.
var hedgePolicies = []Hedge{
	{},
	{Cancel: Cancel{On: true, Spare: 1}},
	{Rank: RankLeast, Quantum: 3, Preempt: true},
	{Probe: 4, Rank: RankMost, Preempt: true},
	{Members: 2, Rank: RankSibling, Median: 10},
	{Members: 1, Rank: RankSibling, Median: 10, Preempt: true},
	{Age: 6, Replace: true, Cancel: Cancel{On: true, Spare: 1}},
	{Members: 2, Rank: RankSibling, Median: 10, Age: 5, Replace: true, Cancel: Cancel{On: true}},
	{Surplus: true, Replace: true},
	{Age: 4, Replace: true, Over: 1.5, From: 0.3, Prior: 0.7, Cancel: Cancel{On: true}},
	{Members: 1, Rank: RankLeast, Quantum: 4, Preempt: true, Swap: true},
}

func TestHedgeModelIsFirstKeptWithoutHedging(t *testing.T) {
	c := Cost{A: 1, C: 0.01, P: 0.001, B: 5}
	gs := randomGroups(12, 4, 40, 1)
	for _, tt := range []struct {
		name         string
		m, target    int
		conc         int
		cancel       Cancel
		wantFinished bool
	}{
		{"all groups, no cancel", 12, 4, 0, Cancel{}, true},
		{"first 8, cancel undecided", 8, 4, 0, Cancel{On: true}, true},
		{"first 10, spare 2, conc 7", 10, 3, 7, Cancel{On: true, Spare: 2}, true},
		{"more than the groups hold", 3, 12, 6, Cancel{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := FirstKept(gs[:tt.m], tt.target, c, tt.conc, tt.cancel)
			got, err := HedgeModel(gs, tt.m, tt.target, c, tt.conc, Hedge{Cancel: tt.cancel})
			if err != nil {
				t.Fatal(err)
			}
			if got.Stopped != want {
				t.Errorf("HedgeModel = %+v, FirstKept = %+v", got.Stopped, want)
			}
			if (got.Kept == tt.target) != tt.wantFinished {
				t.Errorf("kept %d of target %d", got.Kept, tt.target)
			}
		})
	}
}

func TestHedgeModelCountsCancelledTokens(t *testing.T) {
	c := Cost{A: 1, B: 16}
	gs := []OracleGroup{
		// decided at step 5 (a right and a wrong member), done at 9
		hedgeGroup(0, []int{3, 5, 9}, []bool{true, false, true}),
		// nothing finished before step 20
		hedgeGroup(1, []int{20, 20}, []bool{true, true}),
	}
	for _, tt := range []struct {
		name    string
		h       Hedge
		t       float64
		decoded int64
		cancel  int
	}{
		// group 1 runs on beside group 0 until the stop at step 9
		{"no hedge", Hedge{}, 9, 3 + 5 + 9 + 9 + 9, 0},
		// age 4: at step 4 nothing is decided and group 0 (undecided, at
		// the prior keep rate 1/2) does not hold the target; at step 5
		// it is decided and group 1 goes, 5 tokens decoded by each member
		{"age 4", Hedge{Age: 4}, 9, 3 + 5 + 9 + 5 + 5, 1},
		// age 12: group 1 is not old before the stop
		{"age 12", Hedge{Age: 12}, 9, 3 + 5 + 9 + 9 + 9, 0},
		// cancel undecided does the same as age 4, at the same step
		{"cancel undecided", Hedge{Cancel: Cancel{On: true}}, 9, 3 + 5 + 9 + 5 + 5, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HedgeModel(gs, len(gs), 1, c, 0, tt.h)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.T.Seconds()-tt.t) > 1e-9 || got.Decoded != tt.decoded || got.Cancelled != tt.cancel || got.Kept != 1 {
				t.Errorf("HedgeModel = T %g, decoded %d, cancelled %d, kept %d; want %g, %d, %d, 1",
					got.T.Seconds(), got.Decoded, got.Cancelled, got.Kept, tt.t, tt.decoded, tt.cancel)
			}
		})
	}
}

// TestHedgeModelIsBlind lengthens one request at a time and checks that
// the two runs' logs first differ at a finish (the length revealed),
// never at a decision of the policy: no decision reads a length before
// the client could know it.
func TestHedgeModelIsBlind(t *testing.T) {
	c := Cost{A: 1, C: 0.01, P: 0.001, B: 6}
	base := randomGroups(10, 4, 30, 2)
	for _, h := range hedgePolicies {
		t.Run(h.String(), func(t *testing.T) {
			diverged := 0
			for gi := range base {
				for ti := range base[gi].Trajs {
					ref := hedgeLog(t, base, c, h)
					longer := cloneGroups(base)
					longer[gi].Trajs[ti].Turns[0].Decode += 7
					got := hedgeLog(t, longer, c, h)
					i := firstDiff(ref, got)
					if i < 0 {
						continue
					}
					diverged++
					// the shorter run learns the length first
					if at(ref, i).kind != 'f' {
						t.Fatalf("lengthening group %d member %d: the runs first differ at event %d: %+v / %+v, not at a finish",
							gi, ti, i, at(ref, i), at(got, i))
					}
				}
			}
			if diverged == 0 {
				t.Error("no lengthened request changed the run: the test has no teeth")
			}
		})
	}
}

func TestHedgeModelMultiTurn(t *testing.T) {
	gs := []OracleGroup{{Trajs: []*Traj{{Turns: []Turn{{Decode: 1}, {Decode: 1}}}}}}
	if _, err := HedgeModel(gs, 1, 1, Cost{A: 1, B: 1}, 0, Hedge{}); err == nil {
		t.Error("HedgeModel took a two-turn trajectory")
	}
}

// randomGroups are n groups of size members with lengths in [1, maxLen]
// (each group's lengths share a factor, as the simulator's do) and
// random verdicts, from seed.
func randomGroups(n, size, maxLen int, seed uint64) []OracleGroup {
	rng := rand.New(rand.NewPCG(seed, 7))
	var gs []OracleGroup
	for g := range n {
		f := 0.3 + rng.Float64()
		var lens []int
		var ok []bool
		for range size {
			lens = append(lens, max(1, min(maxLen, int(f*float64(1+rng.IntN(maxLen))))))
			ok = append(ok, rng.IntN(3) == 0)
		}
		gs = append(gs, hedgeGroup(int64(g), lens, ok))
	}
	return gs
}

func cloneGroups(gs []OracleGroup) []OracleGroup {
	out := slices.Clone(gs)
	for i := range out {
		out[i].Trajs = nil
		for _, tr := range gs[i].Trajs {
			cp := *tr
			cp.Turns = slices.Clone(tr.Turns)
			out[i].Trajs = append(out[i].Trajs, &cp)
		}
	}
	return out
}

// hedgeLog runs h on gs with a target of 3 and the first 6 groups
// started, and returns its decisions and finishes in order.
func hedgeLog(t *testing.T, gs []OracleGroup, c Cost, h Hedge) []hedgeEvent {
	t.Helper()
	r := newHedgeRun(gs, 3, c, 0, h)
	r.logFinish = true
	for range 6 {
		r.start()
	}
	r.run()
	return r.events
}

func firstDiff(a, b []hedgeEvent) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func at(es []hedgeEvent, i int) hedgeEvent {
	if i < len(es) {
		return es[i]
	}
	return hedgeEvent{step: math.MaxInt}
}
