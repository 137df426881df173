package serve

import (
	"slices"

	"github.com/trajflow/trajflow/stages/groups"
)

// recentRequests is how many of the latest requests' K the standing
// demand follows: a step of serve.buffer_steps is the largest of them.
const recentRequests = 8

// demand is the policy the ledger consults to set the run's demand: the
// kept groups the run is asked for in all (groups.Supply). The ledger's
// lock guards it.
type demand struct {
	buffer int            // serve.buffer_steps
	fill   int            // ledgerConfig.Fill
	bound  *groups.Bound  // ledgerConfig.Staleness; nil: none
	supply *groups.Supply // the run's demand; nil in tests
	recent []int          // the K of the last recentRequests requests, oldest first
}

// noteRequest adds a request's K to the recent ones.
func (d *demand) noteRequest(k int) {
	d.recent = append(d.recent, k)
	if n := len(d.recent); n > recentRequests {
		d.recent = slices.Delete(d.recent, 0, n-recentRequests)
	}
}

// stepSize is the size of a step of serve.buffer_steps: the largest K of
// the recent requests (0 before the first).
func (d *demand) stepSize() int {
	if len(d.recent) == 0 {
		return 0
	}
	return slices.Max(d.recent)
}

// raise raises the run's demand to held (the kept groups in steps or set
// aside as stale: the run's, which others must replace) plus asked (what
// the waiting trainers ask for) plus the look-ahead: serve.buffer_steps
// steps, a step being the largest K of the recent requests (stepSize, so
// that a single large request does not set the look-ahead for good), and
// at least the groups that keep the fleet busy (fill). Under
// serve.max_staleness the demand is at least what the staleness bound
// lets the run accept at version policy, plus the stale groups: the
// bound paces generation, not the look-ahead. The demand only grows (the
// run cannot take back what it admitted); a smaller look-ahead shows as a
// slower growth.
func (d *demand) raise(held, asked, stale int, policy int64) {
	ahead := d.buffer * d.stepSize()
	if d.buffer > 0 {
		ahead = max(ahead, d.fill)
	}
	want := held + asked + ahead
	if d.bound != nil && d.bound.StepGroups > 0 {
		want = max(want, d.bound.Groups(policy)+stale)
	}
	if d.supply != nil {
		d.supply.Raise(want)
	}
}

// setDemand raises the run's demand (demand.raise) for the groups in
// steps, those set aside as stale and those the waiting trainers ask
// for: the ranks of a world waiting share one step, counted once, and
// not at all while one is being made. l.mu is held.
func (l *ledger) setDemand() {
	asked := 0
	worlds := map[int]bool{}
	for _, w := range l.waiters {
		if w.world > 0 {
			if worlds[w.world] || l.making[w.world] > 0 {
				continue
			}
			worlds[w.world] = true
		}
		asked += w.k
	}
	stale := len(l.sp.stale)
	l.dem.raise(len(l.assigned)+stale, asked, stale, l.st.Policy)
}

// fillGroups is the kept groups that keep concurrency generation slots
// busy with groups of n: one group's worth of slots per group, rounded
// up (a group in flight holds at least one kept group's rollouts).
func fillGroups(concurrency, n int) int {
	if n < 1 {
		return 0
	}
	return (concurrency + n - 1) / n
}
