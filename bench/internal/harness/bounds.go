package harness

import (
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
	type state struct {
		left, seen    int
		first         bool
		decided, gone bool
	}
	m := newBatchModel(c, conc)
	var (
		out     Stopped
		decided int
		trajs   []*Traj
		owner   []int
	)
	st := make([]state, len(gs))
	for gi, g := range gs {
		for _, tr := range g.Trajs {
			if len(tr.Turns) == 0 {
				continue
			}
			st[gi].left++
			m.arrive(0, len(trajs), 0)
			trajs = append(trajs, tr)
			owner = append(owner, gi)
		}
	}
	req := func(a arrival) *modelReq {
		if st[owner[a.traj]].gone {
			return nil
		}
		u := trajs[a.traj].Turns[a.turn]
		return &modelReq{g: owner[a.traj], traj: a.traj, turn: a.turn, remaining: max(u.Decode, 1), prompt: u.Prompt}
	}
	for out.Kept < target {
		finished, ran, ok := m.step(req)
		if !ok {
			break
		}
		out.Decoded += int64(ran)
		var cut bool
		for _, r := range finished {
			tr := trajs[r.traj]
			if r.turn+1 < len(tr.Turns) {
				m.arrive(m.t+tr.Turns[r.turn].EnvDelay.Seconds(), r.traj, r.turn+1)
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
					out.T = seconds(m.t + tr.Turns[r.turn].EnvDelay.Seconds())
				}
			}
			if cancel.On && out.Kept+decided >= target+cancel.Spare {
				cut = true
			}
		}
		if cut {
			// every group still undecided is dropped at once
			for gi := range st {
				if !st[gi].decided && !st[gi].gone && st[gi].left > 0 {
					st[gi].gone = true
				}
			}
			m.remove(func(r *modelReq) bool { return st[r.g].gone })
		}
	}
	return out
}
