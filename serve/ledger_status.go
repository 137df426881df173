package serve

import (
	"fmt"
	"sort"

	"github.com/trajflow/trajflow/serve/client"
)

// status fills the ledger's part of the service's status. It changes
// nothing: a lease past its expiry counts as expired (and its step as to
// be served again) whether or not expire has removed it yet.
func (l *ledger) status(out *client.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out.PolicyVersion = l.st.Policy
	if l.st.Paused != "" {
		out.Paused, out.PauseMode = true, l.st.Paused
		out.PausedSince, out.PausedBy = l.st.PausedAt, l.st.PausedBy
		if l.pauseTimeout > 0 {
			out.PauseExpires = l.st.PausedAt.Add(l.pauseTimeout)
		}
	}
	out.QueuedGroups = len(l.queue)
	out.Waiting = []int{}
	for _, w := range l.waiters {
		out.Waiting = append(out.Waiting, w.k)
	}
	if l.dem.supply != nil {
		out.Demand = l.dem.supply.Target()
	}
	expired := l.counts.expired
	for _, exp := range l.leases {
		if !now.Before(exp) {
			expired++
		}
	}
	out.Leases = []client.Lease{}
	leased := map[int64]bool{}
	for s, exp := range l.leases {
		if now.Before(exp) {
			leased[s.step] = true
			lease := client.Lease{Step: s.step, Expires: exp.UTC()}
			if st := l.steps[s.step]; st != nil && st.World > 0 {
				lease.Rank = &s.rank
			}
			out.Leases = append(out.Leases, lease)
		}
	}
	for _, st := range l.st.Steps {
		out.Steps.Made++
		switch {
		case st.Acked:
			out.Steps.Acked++
			out.LastAckedStep = max(out.LastAckedStep, st.Step)
		case leased[st.Step]:
			out.Steps.Leased++
		default:
			out.Steps.Pending++
		}
	}
	sort.Slice(out.Leases, func(i, j int) bool {
		a, b := out.Leases[i], out.Leases[j]
		if a.Step != b.Step || a.Rank == nil || b.Rank == nil {
			return a.Step < b.Step
		}
		return *a.Rank < *b.Rank
	})
	out.NextStep = l.next
	out.Served, out.Reserved, out.Expired, out.Acked = l.counts.served, l.counts.reserved, expired, l.counts.acked
	out.Drift = driftStatus(l.st.Steps)
	out.StaleGroups = len(l.sp.stale)
	out.StaleShare = l.sp.watch.share()
	out.StaleAlarm = l.sp.watch.report(l.st.Policy, l.sp.maxStale())
	if l.sp.unserved != nil {
		out.RequeuedGroups = l.sp.unserved.Requeued()
	}
	out.Staleness = map[string]int{}
	for _, g := range l.queue {
		lag := out.PolicyVersion - g.versions[0]
		out.Staleness[fmt.Sprint(max(lag, 0))]++
	}
	if l.ended != nil {
		out.Ended = l.ended.Error()
	}
}
