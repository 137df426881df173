package harness

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"
)

// LongestFirst is the makespan of a clairvoyant streaming client on the
// simulator's batching model: FIFO's client, with the trajectories sent
// longest first (by their decode tokens over all turns, ties in input
// order). It knows what no live client knows, every request's length, and
// is the classic longest-processing-time-first schedule: on one batch of B
// slots it starts the long requests at t = 0, so the batch drains evenly
// and the makespan comes close to T_ideal. T_ideal / T_LPT bounds what a
// schedule of exactly these trajectories can reach when it knows the
// lengths; T_ideal / T_FIFO (and RandomOrder) when it does not.
func LongestFirst(trajs []*Traj, c Cost, conc int) time.Duration {
	sorted := slices.Clone(trajs)
	slices.SortStableFunc(sorted, func(a, b *Traj) int {
		da, db := a.DecodeTokens(), b.DecodeTokens()
		switch {
		case da > db:
			return -1
		case da < db:
			return 1
		}
		return 0
	})
	return FIFO(sorted, c, conc)
}

// RandomOrder is the mean makespan of FIFO's client over rounds orders of
// the groups drawn from seed (each group's trajectories kept together, as
// a run sends them): what a client that knows which groups are needed but
// not their lengths can expect, whatever order it picks without looking
// at the lengths.
func RandomOrder(gs []OracleGroup, c Cost, conc, rounds int, seed uint64) time.Duration {
	if rounds < 1 || len(gs) == 0 {
		return 0
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	order := slices.Clone(gs)
	var sum time.Duration
	for range rounds {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		sum += FIFO(AllTrajs(order), c, conc)
	}
	return sum / time.Duration(rounds)
}

// Stopped is the outcome of FirstKept: when the K-th kept group finished,
// and what the server decoded until then.
type Stopped struct {
	T       time.Duration
	Decoded int64
	// Kept is the kept groups finished by T (K unless gs hold fewer).
	Kept int
}

// Cancel is FirstKept's groups.cancel_undecided: On, and the spare
// decided groups it waits for (groups.cancel_undecided_spare).
type Cancel struct {
	On    bool
	Spare int
}

// FirstKept is the makespan and the decoded tokens of a zero-overhead
// dynamic-sampling client that knows neither lengths nor outcomes: FIFO's
// client and server on every trajectory of gs (all sent at t = 0 in
// order, at most conc in the server), stopping when the target-th kept
// group finishes; groups finish in whatever order their lengths give, so
// the first K kept groups to finish are committed, as trajflow's
// groups.order: completion does. With cancel.On, once the kept groups and
// those decided by two finished members of different correctness hold
// the target plus cancel.Spare, every group still undecided is dropped at
// once (its requests leave the server), as groups.cancel_undecided does.
// Sweeping len(gs) past the prefix shows what starting groups beyond the
// need buys in time and costs in tokens.
func FirstKept(gs []OracleGroup, target int, c Cost, conc int, cancel Cancel) Stopped {
	type req struct {
		g, traj, turn, remaining, prompt int
	}
	type state struct {
		left, seen    int
		first         bool
		decided, gone bool
	}
	var (
		t        float64
		arrivals arrivalHeap
		waiting  []*req
		queue    []*req
		running  []*req
		inServer int
		seq      int
		out      Stopped
		decided  int
	)
	var trajs []*Traj
	var owner []int
	st := make([]state, len(gs))
	for gi, g := range gs {
		for _, tr := range g.Trajs {
			if len(tr.Turns) == 0 {
				continue
			}
			st[gi].left++
			heap.Push(&arrivals, arrival{at: 0, seq: seq, traj: len(trajs)})
			seq++
			trajs = append(trajs, tr)
			owner = append(owner, gi)
		}
	}
	drop := func() {
		for gi := range st {
			if !st[gi].decided && !st[gi].gone && st[gi].left > 0 {
				st[gi].gone = true
			}
		}
		live := func(rs []*req) []*req {
			k := rs[:0]
			for _, r := range rs {
				if st[r.g].gone {
					inServer--
					continue
				}
				k = append(k, r)
			}
			return k
		}
		// waiting holds requests not yet in the server.
		w := waiting[:0]
		for _, r := range waiting {
			if !st[r.g].gone {
				w = append(w, r)
			}
		}
		waiting = w
		queue = live(queue)
		running = live(running)
	}
	for out.Kept < target {
		for arrivals.Len() > 0 && arrivals[0].at <= t+1e-12 {
			a := heap.Pop(&arrivals).(arrival)
			if st[owner[a.traj]].gone {
				continue
			}
			u := trajs[a.traj].Turns[a.turn]
			waiting = append(waiting, &req{g: owner[a.traj], traj: a.traj, turn: a.turn, remaining: max(u.Decode, 1), prompt: u.Prompt})
		}
		for len(waiting) > 0 && (conc <= 0 || inServer < conc) {
			queue = append(queue, waiting[0])
			waiting = waiting[1:]
			inServer++
		}
		if len(running) == 0 && len(queue) == 0 {
			if arrivals.Len() == 0 {
				break
			}
			t = arrivals[0].at
			continue
		}
		prompt := 0
		for len(queue) > 0 && len(running) < c.B {
			prompt += queue[0].prompt
			running = append(running, queue[0])
			queue = queue[1:]
		}
		t += c.A + c.C*float64(len(running)) + c.P*float64(prompt)
		out.Decoded += int64(len(running))
		kept := running[:0]
		var cut bool
		for _, r := range running {
			r.remaining--
			if r.remaining > 0 {
				kept = append(kept, r)
				continue
			}
			inServer--
			tr := trajs[r.traj]
			if r.turn+1 < len(tr.Turns) {
				heap.Push(&arrivals, arrival{at: t + tr.Turns[r.turn].EnvDelay.Seconds(), seq: seq, traj: r.traj, turn: r.turn + 1})
				seq++
				continue
			}
			s := &st[r.g]
			s.left--
			switch s.seen++; {
			case s.seen == 1:
				s.first = tr.Correct
			case !s.decided && tr.Correct != s.first:
				s.decided = true
				decided++
			}
			if s.left == 0 {
				if s.decided {
					decided--
				}
				if gs[r.g].Kept {
					out.Kept++
					out.T = seconds(t + tr.Turns[r.turn].EnvDelay.Seconds())
				}
			}
			if cancel.On && out.Kept+decided >= target+cancel.Spare {
				cut = true
			}
		}
		running = kept
		if cut {
			drop()
		}
	}
	return out
}
