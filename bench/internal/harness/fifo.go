package harness

import (
	"time"
)

// FIFO is the makespan of a zero-overhead streaming client on the
// simulator's batching model: every trajectory's first request is sent at
// time 0 in input order, each later turn the instant its environment delay
// ends, at most conc requests are in the server at once (the rest wait in
// order), and the server admits from its FIFO queue at step boundaries,
// as the simulator does. No client can do better without knowing the
// lengths in advance, so T_FIFO / T_actual isolates a pipeline's own cost
// from the drain that the workload's length distribution forces.
func FIFO(trajs []*Traj, c Cost, conc int) time.Duration {
	m := newBatchModel(c, conc)
	for i, tr := range trajs {
		if len(tr.Turns) > 0 {
			m.arrive(0, i, 0)
		}
	}
	req := func(a arrival) *modelReq {
		u := trajs[a.traj].Turns[a.turn]
		return &modelReq{traj: a.traj, turn: a.turn, remaining: max(u.Decode, 1), prompt: u.Prompt}
	}
	var end float64
	for {
		finished, _, ok := m.step(req)
		if !ok {
			return seconds(end)
		}
		for _, r := range finished {
			tr := trajs[r.traj]
			done := m.t + tr.Turns[r.turn].EnvDelay.Seconds()
			if r.turn+1 < len(tr.Turns) {
				m.arrive(done, r.traj, r.turn+1)
			} else {
				end = max(end, done)
			}
		}
	}
}

type arrival struct {
	at         float64
	seq        int
	traj, turn int
}

type arrivalHeap []arrival

func (h arrivalHeap) Len() int { return len(h) }
func (h arrivalHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h arrivalHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)   { *h = append(*h, x.(arrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
