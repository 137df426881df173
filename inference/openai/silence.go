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

// The canary: an endpoint that has held requests without answering for
// suspectAfter (canaryFactor times the fleet's typical answer time, at
// least suspectFloor) while another answers is sent a canary, a request
// of one token on generate.api's protocol, and so is an answering peer,
// the control. The suspect is silent when its canary has no answer
// within max(canaryWaitFloor, canaryWaitFactor × the peer's canary
// time); a canary that answers shows an endpoint alive and busy, left to
// the floor rule (silentAfter). Without the peer's answer (within
// HTTPOptions.ProbeTimeout) there is no verdict.
const (
	suspectFloor     = 100 * time.Millisecond
	canaryFactor     = 4
	canaryWaitFloor  = 300 * time.Millisecond
	canaryWaitFactor = 10
	// typicalWeight is the weight of each answer in the typical answer
	// time (an exponential moving average).
	typicalWeight = 0.1
	// canaryTick bounds the silence loop's interval, so that a canary
	// goes out soon after an endpoint becomes a suspect.
	canaryTick = 25 * time.Millisecond
)

// silence is the fleet's watch for endpoints that accept requests and
// never answer: per endpoint, since when it holds requests without
// answering (busySince), its last answer and the attempts it holds (to
// move them); for the fleet, the longest and the typical recent answer
// times. f.mu guards it.
type silence struct {
	floor   time.Duration // HTTPOptions.SilenceAfter
	longest time.Duration // the longest answer time seen, slowly forgotten (longestDecay)
	typical time.Duration // moving average of answer times (typicalWeight)
	nextID  uint64
}

// canaryRound is a canary to send: to suspect, and the same to peer, the
// control.
type canaryRound struct {
	suspect, peer *endpoint
	// busySince is the suspect's busySince when the round began: an
	// answer of the suspect since (a new busy period) voids the verdict.
	busySince time.Time
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
	e.lastAnswer = now
	e.busySince = now
	f.sil.longest = max(took, time.Duration(float64(f.sil.longest)*longestDecay))
	if f.sil.typical == 0 {
		f.sil.typical = took
	} else {
		f.sil.typical += time.Duration(typicalWeight * float64(took-f.sil.typical))
	}
}

// silentAfter is how long an endpoint may hold requests without an
// answer while others answer; f.mu is held.
func (f *fleet) silentAfter() time.Duration {
	return max(f.sil.floor, silenceFactor*f.sil.longest)
}

// suspectAfter is how long an endpoint may hold requests without an
// answer while others answer before it is sent a canary; f.mu is held.
func (f *fleet) suspectAfter() time.Duration {
	return max(suspectFloor, canaryFactor*f.sil.typical)
}

// checkSilence takes out the endpoints that hold requests and have
// answered none for silentAfter while another endpoint answered within
// it, or answered since and has nothing left to do (otherAlive: an engine
// still loading, or a fleet where none answers, is left alone), and cancels their attempts so that they go to the others. A
// silent endpoint is probed back in no sooner than after silentAfter,
// doubled at each time it is found silent again.
//
// It returns the canary rounds due: an endpoint that has held requests
// without answering for suspectAfter (and, once its canary answered,
// for twice as long as when it was last sent one) while another answers,
// with that other endpoint as the control; the caller sends them
// (HTTPClient.canaryRound) and gives the verdict to canaryVerdict.
func (f *fleet) checkSilence() []canaryRound {
	now := f.now()
	var cancels []context.CancelCauseFunc
	var rounds []canaryRound
	f.mu.Lock()
	after := f.silentAfter()
	suspect := f.suspectAfter()
	for _, e := range f.eps {
		if !e.healthy || e.inflight == 0 || e.busySince.IsZero() {
			continue
		}
		held := now.Sub(e.busySince)
		if held >= after && f.otherAlive(e, now, after) {
			f.takeOut(e, now, after, fmt.Sprintf("silent: no answer for %s with %d requests in flight while the other endpoints answer or are done; its requests move to them", held.Round(time.Second), e.inflight))
			for _, cancel := range e.attempts {
				cancels = append(cancels, cancel)
			}
			continue
		}
		if e.canaryOut || held < suspect {
			continue
		}
		if e.canaryFor.Equal(e.busySince) && held < 2*e.canaryHeld {
			continue // its canary answered in this busy period: wait twice as long for the next
		}
		if peer := f.control(e, now, after); peer != nil {
			e.canaryOut, e.canaryFor, e.canaryHeld = true, e.busySince, held
			rounds = append(rounds, canaryRound{suspect: e, peer: peer, busySince: e.busySince})
		}
	}
	f.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errSilent)
	}
	return rounds
}

// takeOut takes e out as silent, to be probed again no sooner than base,
// doubled at each time it went silent before, from now; the caller
// cancels its attempts. f.mu is held.
func (f *fleet) takeOut(e *endpoint, now time.Time, base time.Duration, why string) {
	e.silentOuts++
	e.silent = true
	e.probeAfter = now.Add(base << min(e.silentOuts-1, 6))
	e.moved += int64(len(e.attempts))
	f.setHealthy(e, false, why)
}

// control is the endpoint that serves as e's canary control: the one
// other than e that answered last, when otherAlive holds for it; nil
// when none does. f.mu is held.
func (f *fleet) control(e *endpoint, now time.Time, after time.Duration) *endpoint {
	var best *endpoint
	for _, o := range f.eps {
		if f.aliveBeside(e, o, now, after) && (best == nil || o.lastAnswer.After(best.lastAnswer)) {
			best = o
		}
	}
	return best
}

// canaryVerdict ends r's round. silent: the suspect's canary had no
// answer in time while the peer's answered; why says so. The suspect is
// taken out, and its attempts moved, only while the round still holds:
// it is in, holds requests and has not answered since the round began.
// An answered canary leaves the suspect to the floor rule, with the next
// canary due once it has held its requests twice as long.
func (f *fleet) canaryVerdict(r canaryRound, silent bool, why string, base time.Duration) {
	var cancels []context.CancelCauseFunc
	f.mu.Lock()
	e := r.suspect
	e.canaryOut = false
	if silent && e.healthy && e.inflight > 0 && e.busySince.Equal(r.busySince) {
		now := f.now()
		f.takeOut(e, now, base, fmt.Sprintf("silent: no answer for %s with %d requests in flight, and %s; its requests move to the others", now.Sub(e.busySince).Round(time.Millisecond), e.inflight, why))
		for _, cancel := range e.attempts {
			cancels = append(cancels, cancel)
		}
	}
	f.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errSilent)
	}
}

// otherAlive reports whether an endpoint other than e that is in shows
// the fleet working while e is quiet: it answered since e began holding
// requests, and either within after or it holds none now (it has done
// its work: the run's tail, where the others are idle and e holds the
// last requests). A fleet where every endpoint holds requests and none
// answered within after (engines still loading, a stall of the whole
// fleet or of this process) judges none. f.mu is held.
func (f *fleet) otherAlive(e *endpoint, now time.Time, after time.Duration) bool {
	for _, o := range f.eps {
		if f.aliveBeside(e, o, now, after) {
			return true
		}
	}
	return false
}

// aliveBeside is otherAlive's test of one endpoint o. f.mu is held.
func (f *fleet) aliveBeside(e, o *endpoint, now time.Time, after time.Duration) bool {
	return o != e && o.healthy && o.lastAnswer.After(e.busySince) && (now.Sub(o.lastAnswer) < after || o.inflight == 0)
}

// silenceLoop checks the fleet for silent endpoints every interval and
// sends the canary rounds due.
func (c *HTTPClient) silenceLoop(ctx context.Context, interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, r := range c.fleet.checkSilence() {
				c.wg.Add(1)
				go c.canaryRound(ctx, r)
			}
		}
	}
}
