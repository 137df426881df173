package openai

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errSilent is the cause of an attempt cancelled because its endpoint went
// silent: the request is sent again on another endpoint.
var errSilent = errors.New("its endpoint went silent")

// silenceFactor times the fleet's longest recent answer time is how long
// an endpoint may hold requests without answering any, while others
// answer, before it is taken out as silent (at least
// HTTPOptions.SilenceAfter): an endpoint busy with long answers is not
// silent for as long as the longest answers take.
const silenceFactor = 2

// longestDecay is how fast the longest answer time seen forgets: each
// answer shrinks it by this factor before taking the max.
const longestDecay = 0.995

// silence is the fleet's watch for endpoints that accept requests and
// never answer: per endpoint, since when it holds requests without
// answering (busySince) and the attempts it holds (to move them); for the
// fleet, the last answer of any endpoint and the mean answer time. f.mu
// guards it.
type silence struct {
	floor      time.Duration // HTTPOptions.SilenceAfter
	lastAnswer time.Time
	longest    time.Duration // the longest answer time seen, slowly forgotten (longestDecay)
	nextID     uint64
}

// track registers an attempt on e, cancelled by cancel when e goes
// silent, and returns its id for untrack.
func (f *fleet) track(e *endpoint, cancel context.CancelCauseFunc) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sil.nextID++
	if e.attempts == nil {
		e.attempts = map[uint64]context.CancelCauseFunc{}
	}
	e.attempts[f.sil.nextID] = cancel
	return f.sil.nextID
}

// untrack ends an attempt's registration.
func (f *fleet) untrack(e *endpoint, id uint64) {
	f.mu.Lock()
	delete(e.attempts, id)
	f.mu.Unlock()
}

// answered notes an answer of e (any HTTP answer: the endpoint is alive)
// that took took; f.mu is held.
func (f *fleet) answered(e *endpoint, took time.Duration, now time.Time) {
	f.sil.lastAnswer = now
	e.busySince = now
	f.sil.longest = max(took, time.Duration(float64(f.sil.longest)*longestDecay))
}

// silentAfter is how long an endpoint may hold requests without an
// answer while others answer; f.mu is held.
func (f *fleet) silentAfter() time.Duration {
	return max(f.sil.floor, silenceFactor*f.sil.longest)
}

// checkSilence takes out the endpoints that hold requests and have
// answered none for silentAfter while another endpoint answered within
// it (an engine still loading, or a fleet where none answers, is left
// alone), and cancels their attempts so that they go to the others. A
// silent endpoint is probed back in no sooner than after silentAfter,
// doubled at each time it is found silent again.
func (f *fleet) checkSilence() {
	now := f.now()
	var cancels []context.CancelCauseFunc
	f.mu.Lock()
	after := f.silentAfter()
	for _, e := range f.eps {
		if !e.healthy || e.inflight == 0 || e.busySince.IsZero() || now.Sub(e.busySince) < after ||
			f.sil.lastAnswer.IsZero() || now.Sub(f.sil.lastAnswer) >= after || !f.otherHealthy(e) {
			continue
		}
		e.silentOuts++
		e.probeAfter = now.Add(after << min(e.silentOuts-1, 6))
		e.moved += int64(len(e.attempts))
		f.setHealthy(e, false, fmt.Sprintf("silent: no answer for %s with %d requests in flight while the other endpoints answer; its requests move to them", now.Sub(e.busySince).Round(time.Second), e.inflight))
		for _, cancel := range e.attempts {
			cancels = append(cancels, cancel)
		}
	}
	f.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errSilent)
	}
}

// otherHealthy reports whether an endpoint other than e is in; f.mu is
// held.
func (f *fleet) otherHealthy(e *endpoint) bool {
	for _, o := range f.eps {
		if o != e && o.healthy {
			return true
		}
	}
	return false
}

// silenceLoop checks the fleet for silent endpoints every interval.
func (c *HTTPClient) silenceLoop(ctx context.Context, interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.fleet.checkSilence()
		}
	}
}
