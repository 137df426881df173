package groups

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// binomAtLeast is P(X >= k) for X ~ Binomial(n, p).
func binomAtLeast(n, k int, p float64) float64 {
	var below float64
	for i := 0; i < k && i <= n; i++ {
		lc := lgamma(n+1) - lgamma(i+1) - lgamma(n-i+1)
		below += math.Exp(lc + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return 1 - below
}

func lgamma(x int) float64 { v, _ := math.Lgamma(float64(x)); return v }

// TestBudgetHoldsTheNeedWithMargin: under a target the groups in flight
// hold the kept groups still needed with high probability at the observed
// keep rate, not only on average, and never exceed the cap.
func TestBudgetHoldsTheNeedWithMargin(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		target, cap, kept, done int
	}{
		{"start", 64, 64, 0, 0},
		{"start, no cap", 64, 1000, 0, 0},
		{"low keep rate, near the end", 64, 1000, 60, 200},
		{"low keep rate, last one", 64, 1000, 63, 210},
		{"half, middle", 64, 1000, 32, 64},
		{"high keep rate, near the end", 64, 1000, 61, 87},
		{"capped", 256, 64, 10, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newController(tc.target, tc.cap, 1, false, nil)
			c.kept, c.finished = tc.kept, tc.done
			b := c.budget()
			need := tc.target - tc.kept
			rate := (float64(tc.kept) + 1) / (float64(tc.done) + 2)
			if b > tc.cap {
				t.Fatalf("budget %d over the cap %d", b, tc.cap)
			}
			mean := int(math.Ceil(float64(need) / rate))
			if b < min(mean, tc.cap) {
				t.Fatalf("budget %d below need/rate %d", b, mean)
			}
			if b < tc.cap {
				if p := binomAtLeast(b, need, rate); p < 0.75 {
					t.Fatalf("budget %d holds the need %d with probability %.2f at rate %.2f, want >= 0.75", b, need, p, rate)
				}
				if b > 2*mean+4 {
					t.Fatalf("budget %d far beyond need/rate %d", b, mean)
				}
			}
		})
	}
	// Without a target the budget is the cap.
	if got := newController(0, 17, 1, false, nil).budget(); got != 17 {
		t.Fatalf("no target: budget %d, want 17", got)
	}
}

// TestBatchResample: under groups.resample: batch the controller reads the
// input once and, each time a round ends short of the target, samples
// every task read again in the next attempt, kept ones included, as
// verl-agent's dynamic_multi_turn_loop re-runs its batch; tasks given up
// (Abandon) are not sampled again, and max_attempts bounds the rounds.
func TestBatchResample(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Target: 4, MaxAttempts: 3, Resample: ResampleBatch}
	cfg.SetDefaults()
	c := NewController(cfg, 100, 0, nil)
	input := []*pipeline.Task{{Index: 0}, {Index: 1}, {Index: 2}}
	// keep says which (task, attempt) groups the keep rule keeps.
	keep := map[[2]int64]bool{{0, 0}: true, {0, 1}: true, {1, 1}: true}
	var sampled [][2]int64
	read := 0
	for {
		act, j, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if act == ActDone {
			break
		}
		if act == ActRead {
			if read == len(input) {
				c.ReadDone(nil)
				continue
			}
			j = Job{Task: input[read]}
			read++
			c.ReadDone(j.Task)
			if j.Task.Index == 2 {
				// Rejected (or committed by an earlier run): given up.
				c.Abandon(j.Task)
				continue
			}
		}
		k := [2]int64{j.Task.Index, int64(j.Attempt)}
		sampled = append(sampled, k)
		g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: j.Task.Index, Attempt: j.Attempt}, Kept: keep[k]}
		if !g.Kept {
			g.FilterReason = ReasonZeroStd
		}
		for _, d := range c.GroupDone(g, j.Task) {
			if (d.Verdict == Keep) != g.Kept {
				t.Fatalf("%v: verdict %v", k, d.Verdict)
			}
		}
	}
	want := [][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}}
	if fmt.Sprint(sampled) != fmt.Sprint(want) {
		t.Fatalf("sampled %v, want %v", sampled, want)
	}
	if kept, short := c.ShortOfTarget(); kept != 3 || !short {
		t.Fatalf("kept %d short %v", kept, short)
	}

	// The target reached mid-round ends the run.
	cfg.Target = 2
	c = NewController(cfg, 100, 0, nil)
	sampled = nil
	read = 0
	for {
		act, j, _ := c.Next(ctx)
		if act == ActDone {
			break
		}
		if act == ActRead {
			if read == 2 {
				c.ReadDone(nil)
				continue
			}
			j = Job{Task: input[read]}
			read++
			c.ReadDone(j.Task)
		}
		k := [2]int64{j.Task.Index, int64(j.Attempt)}
		sampled = append(sampled, k)
		c.GroupDone(&pipeline.Group{Key: pipeline.GroupKey{TaskIndex: j.Task.Index, Attempt: j.Attempt}, Kept: keep[k]}, j.Task)
	}
	if want := [][2]int64{{0, 0}, {1, 0}, {0, 1}}; fmt.Sprint(sampled) != fmt.Sprint(want) {
		t.Fatalf("sampled %v, want %v", sampled, want)
	}
}

// TestBatchResampleLastTry: with on_exhausted: keep_unfiltered, a batch
// run fills its target from the last round's dropped groups only, as
// verl-agent returns its last try unfiltered; earlier rounds' dropped
// groups are dropped.
func TestBatchResampleLastTry(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Target: 3, MaxAttempts: 2, Resample: ResampleBatch, OnExhausted: "keep_unfiltered"}
	cfg.SetDefaults()
	c := NewController(cfg, 100, 0, nil)
	input := []*pipeline.Task{{Index: 0}, {Index: 1}}
	read := 0
	verdicts := map[[2]int64]Verdict{}
	for {
		act, j, _ := c.Next(ctx)
		if act == ActDone {
			break
		}
		if act == ActRead {
			if read == len(input) {
				c.ReadDone(nil)
				continue
			}
			j = Job{Task: input[read]}
			read++
			c.ReadDone(j.Task)
		}
		// Only task 0 in round 0 passes the rule.
		k := [2]int64{j.Task.Index, int64(j.Attempt)}
		g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: j.Task.Index, Attempt: j.Attempt}, Kept: k == [2]int64{0, 0}}
		if !g.Kept {
			g.FilterReason = ReasonZeroStd
		}
		for _, d := range c.GroupDone(g, j.Task) {
			verdicts[[2]int64{d.Group.Key.TaskIndex, int64(d.Group.Key.Attempt)}] = d.Verdict
		}
	}
	out, _ := c.Flush()
	for _, d := range out {
		verdicts[[2]int64{d.Group.Key.TaskIndex, int64(d.Group.Key.Attempt)}] = d.Verdict
	}
	want := map[[2]int64]Verdict{{0, 0}: Keep, {1, 0}: Drop, {0, 1}: KeepUnfiltered, {1, 1}: KeepUnfiltered}
	if fmt.Sprint(verdicts) != fmt.Sprint(want) {
		t.Fatalf("verdicts %v, want %v", verdicts, want)
	}
}

// A resumed run's kept groups count towards the target but not in the
// keep rate, which only this run's finished groups measure: a run resumed
// with the target raised starts with a full budget, not one group at a
// time.
func TestResumedKeptLeaveTheRateOut(t *testing.T) {
	fresh := NewController(Config{Target: 64}, 200, 0, nil).budget()
	resumed := NewController(Config{Target: 320}, 200, 256, nil).budget()
	if resumed != fresh || resumed < 64 {
		t.Errorf("budget of a run resumed with 256 of 320 kept = %d, of a fresh run for 64 = %d; want equal, at least 64", resumed, fresh)
	}
}
