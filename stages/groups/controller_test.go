package groups

import (
	"math"
	"testing"
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
