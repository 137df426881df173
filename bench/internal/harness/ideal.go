package harness

import (
	"time"

	"github.com/trajflow/trajflow/inference/sim"
)

// Cost is the simulator's step model after the time scale: a step lasts
// A + C·|R| + P·(prompt tokens admitted), at most B requests run at once.
type Cost struct {
	A, C, P float64 // seconds
	B       int
}

// CostOf is the cost model of a simulator's resolved options.
func CostOf(o sim.Options) Cost {
	s := o.TimeScale
	return Cost{A: o.A.Seconds() * s, C: o.C.Seconds() * s, P: o.P.Seconds() * s, B: o.Capacity}
}

// Ideal is the ideal makespan of a workload and the figures it comes from.
type Ideal struct {
	Trajs int
	// D: decode tokens; P: prompt tokens prefilled (the simulator has no
	// prefix cache, so every turn's whole prompt); LMax: the longest
	// trajectory's decode tokens over all its turns.
	D, P, LMax int64
	// Busy = A·max(D/B, LMax) + C·D + P·P: the server's least busy time.
	Busy time.Duration
	// Chain is the longest trajectory's critical path:
	// Σ_turns (P·P_t + d_t·(A+C) + e_t).
	Chain time.Duration
	// T is max(Busy, Chain).
	T time.Duration
}

// IdealOf computes DESIGN's ideal makespan of trajs under c.
func IdealOf(trajs []*Traj, c Cost) Ideal {
	var id Ideal
	var chain float64
	for _, t := range trajs {
		id.Trajs++
		var l int64
		var ch float64
		for _, u := range t.Turns {
			id.D += int64(u.Decode)
			id.P += int64(u.Prompt)
			l += int64(u.Decode)
			ch += c.P*float64(u.Prompt) + float64(u.Decode)*(c.A+c.C) + u.EnvDelay.Seconds()
		}
		id.LMax = max(id.LMax, l)
		chain = max(chain, ch)
	}
	steps := max(float64(id.D)/float64(max(c.B, 1)), float64(id.LMax))
	busy := c.A*steps + c.C*float64(id.D) + c.P*float64(id.P)
	id.Busy = seconds(busy)
	id.Chain = seconds(chain)
	id.T = max(id.Busy, id.Chain)
	return id
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
