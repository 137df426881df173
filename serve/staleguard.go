package serve

import (
	"fmt"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// staleWindowSteps is how many steps' worth of kept groups the stale
// guard looks back over: a bump that sets one step's look-ahead aside is
// explained by the work in flight; most of several steps' groups set
// aside is not.
const staleWindowSteps = 4

// staleWindow is the stale guard's window for steps of stepGroups groups
// (serve.step_groups; 0: unset): staleWindowSteps steps, at least 32
// groups.
func staleWindow(stepGroups int) int {
	return max(staleWindowSteps*stepGroups, 32)
}

// staleWatch is the guard against a service that sets most of its kept
// groups aside as stale, generating at full speed while nothing reaches
// the trainer: over the last size kept groups decided (handed out in a
// step, or set aside as too stale), it counts those set aside. While the
// window is full and more than half of it was set aside, the alarm is on:
// the service logs it once, with the versions involved, and the status
// shows it until the share falls back. Not safe for concurrent use (the
// ledger's lock guards it).
type staleWatch struct {
	// ring holds the last decisions: the oldest token version of a group
	// set aside, or handedOut.
	ring  []int64
	at, n int
	stale int
	// since is when the alarm went on (zero: off).
	since time.Time
}

// handedOut marks a group handed out in staleWatch.ring.
const handedOut = -1

func newStaleWatch(size int) *staleWatch {
	return &staleWatch{ring: make([]int64, max(size, 1))}
}

// add records a decision: a group handed out (stale false) or set aside
// with its oldest token of version v.
func (w *staleWatch) add(stale bool, v int64) {
	if w.n == len(w.ring) {
		if w.ring[w.at] != handedOut {
			w.stale--
		}
	} else {
		w.n++
	}
	w.ring[w.at] = handedOut
	if stale {
		w.ring[w.at] = max(v, 0)
		w.stale++
	}
	w.at = (w.at + 1) % len(w.ring)
}

// alarming reports whether the window is full and more than half of it
// was set aside.
func (w *staleWatch) alarming() bool {
	return w.n == len(w.ring) && 2*w.stale > w.n
}

// report is the window as the status shows it, at policy version policy
// and maximum staleness maxStale; nil while the alarm is off.
func (w *staleWatch) report(policy, maxStale int64) *client.StaleAlarm {
	if w.since.IsZero() {
		return nil
	}
	a := &client.StaleAlarm{Since: w.since.UTC(), SetAside: w.stale, Window: w.n, Policy: policy, MaxStaleness: maxStale, Oldest: -1, Newest: -1}
	for _, v := range w.ring[:w.n] {
		if v == handedOut {
			continue
		}
		if a.Oldest < 0 || v < a.Oldest {
			a.Oldest = v
		}
		a.Newest = max(a.Newest, v)
	}
	return a
}

// share is the share of the window set aside (0 while empty).
func (w *staleWatch) share() float64 {
	if w.n == 0 {
		return 0
	}
	return float64(w.stale) / float64(w.n)
}

// check turns the alarm on or off as the window says, at now, and returns
// the line to log when it changed ("" otherwise).
func (w *staleWatch) check(now time.Time, policy, maxStale int64) string {
	switch on := w.alarming(); {
	case on && w.since.IsZero():
		w.since = now
		a := w.report(policy, maxStale)
		return fmt.Sprintf("warning: %d of the last %d kept groups were set aside as stale (their oldest tokens of versions %d–%d, the policy at version %d, serve.max_staleness %d): the fleet generates while little reaches the trainer. A trainer that moves the policy on by more versions than max_staleness allows, with groups queued or in flight, sets them aside; see docs/serve.md",
			a.SetAside, a.Window, a.Oldest, a.Newest, policy, maxStale)
	case !on && !w.since.IsZero():
		w.since = time.Time{}
		return fmt.Sprintf("the share of kept groups set aside as stale is back to %.0f%% of the last %d", 100*w.share(), w.n)
	}
	return ""
}
