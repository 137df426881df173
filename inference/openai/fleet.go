package openai

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// endpoint is one server of the fleet. Fields below mu are guarded by the
// fleet's mutex.
type endpoint struct {
	idx  int
	base string // normalised base URL, e.g. http://host:8000/v1
	root string // scheme://host, for /health
	name string // base with its user info redacted (pipeline.RedactURL), for logs, errors, the live view and metrics labels
	hash uint64 // of base, for rendezvous hashing

	inflight   int
	healthy    bool
	consecFail int
	lastFail   time.Time
	coolUntil  time.Time // Retry-After: prefer other endpoints until then
	requests   int64
	retries    int64
	failures   int64

	// busySince is when e last answered, or began to hold requests
	// (silence); zero while it holds none. attempts are its attempts in
	// flight, to move when it goes silent; silentOuts how often it went
	// silent, probeAfter when the prober may try it again, moved the
	// attempts moved off it.
	busySince  time.Time
	lastAnswer time.Time // e's last answer (silence: otherAlive)
	attempts   map[uint64]context.CancelCauseFunc
	silentOuts int
	probeAfter time.Time
	moved      int64
	// silent is set while e is out as silent: the prober tries it with a
	// canary, not GET /models (a hung engine still lists its models).
	// canaries counts the canaries sent to it (as a suspect, as a
	// control, as a probe); canaryOut is set while a round for it is
	// out; canaryFor is the busySince its last round was for, canaryHeld
	// how long it had held its requests then.
	silent     bool
	canaries   int64
	canaryOut  bool
	canaryFor  time.Time
	canaryHeld time.Duration
}

// EndpointStats is one endpoint's counters.
type EndpointStats struct {
	// Endpoint is the base URL (credentials redacted).
	Endpoint string
	// Requests counts HTTP attempts sent, Retries those of them that were
	// retries, Failures those that failed (any class).
	Requests, Retries, Failures int64
	// InFlight is the number of attempts outstanding now.
	InFlight int
	// Healthy is false while the endpoint is taken out after consecutive
	// connection or server failures, or while it is silent (holding
	// requests and answering none while others answer).
	Healthy bool
	// Moved counts the attempts moved off the endpoint when it went
	// silent (each sent again to another).
	Moved int64
	// Canaries counts the canary requests sent to the endpoint (one
	// token each; the silence watch's, docs/inference.md "Silence"): not
	// in Requests, nor in the run's rollouts or tokens.
	Canaries int64
	// ConsecutiveFailures counts connection/5xx failures since the last
	// success.
	ConsecutiveFailures int
	// RetryAfter is what is left of the wait the endpoint asked for with
	// its last Retry-After (0: none).
	RetryAfter time.Duration
}

// normaliseEndpoint checks a base URL and returns its normal form: no
// trailing slash, and /v1 appended when the URL has no path at all.
func normaliseEndpoint(raw string) (base, root, name string, err error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", "", "", fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "sim" {
			return "", "", "", fmt.Errorf("%q is served by the built-in simulator, not the HTTP client", raw)
		}
		return "", "", "", fmt.Errorf("%q: want http://host:port/v1 or https://…", raw)
	}
	if u.Host == "" {
		return "", "", "", fmt.Errorf("%q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", "", fmt.Errorf("%q: a base URL takes no query or fragment", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if u.Path == "" {
		u.Path = "/v1"
	}
	r := *u
	r.Path = ""
	// The name is what errors, logs, the live view and metrics labels
	// show: no user info (a token given as the user name is the whole
	// secret).
	return u.String(), r.String(), pipeline.RedactURL(u.String()), nil
}

// fleet chooses endpoints and tracks their load and health.
type fleet struct {
	mu       sync.Mutex
	eps      []*endpoint
	perCap   int // per-endpoint in-flight bound, 0: none
	slack    int // affinity margin floor
	ejectK   int // consecutive failures that take an endpoint out
	wake     chan struct{}
	rr       int
	now      func() time.Time
	logf     func(string, ...any)
	unhealth int // number of endpoints out
	sil      silence
}

func newFleet(eps []*endpoint, perCap, slack, ejectK int, now func() time.Time, logf func(string, ...any)) *fleet {
	for _, e := range eps {
		e.healthy = true
		h := fnv.New64a()
		h.Write([]byte(e.base))
		e.hash = h.Sum64()
	}
	return &fleet{eps: eps, perCap: perCap, slack: slack, ejectK: ejectK, wake: make(chan struct{}), now: now, logf: logf}
}

// acquire waits for an endpoint with a free slot and takes the slot.
// tried marks endpoints this request already failed on.
func (f *fleet) acquire(ctx context.Context, affinity string, tried []bool, retry bool) (*endpoint, error) {
	for {
		f.mu.Lock()
		if e := f.pickLocked(affinity, tried); e != nil {
			if e.inflight == 0 {
				e.busySince = f.now()
			}
			e.inflight++
			e.requests++
			if retry {
				e.retries++
			}
			f.mu.Unlock()
			return e, nil
		}
		w := f.wake
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w:
		}
	}
}

func (f *fleet) free(e *endpoint) bool { return f.perCap == 0 || e.inflight < f.perCap }

// pickLocked chooses an endpoint with a free slot, or nil when every
// eligible endpoint is full. Eligibility, first tier that has a free
// endpoint wins:
//
//  1. healthy, not yet tried by this request, not cooling down (Retry-After);
//  2. healthy, not cooling down;
//  3. healthy.
//
// Within the tier: the rendezvous-hash favourite for the affinity key when
// its load is within the margin of the least loaded, else the least loaded.
// When no endpoint is healthy at all, the least recently failed one with a
// free slot is tried (the fleet never stays out forever).
func (f *fleet) pickLocked(affinity string, tried []bool) *endpoint {
	now := f.now()
	var akey uint64
	if affinity != "" {
		akey = hashString(affinity)
	}
	for tier := 1; tier <= 3; tier++ {
		var least, pref *endpoint
		var prefScore uint64
		n := len(f.eps)
		for i := 0; i < n; i++ {
			e := f.eps[(f.rr+i)%n]
			if !f.inTier(e, tier, tried, now) {
				continue
			}
			if least == nil || e.inflight < least.inflight {
				least = e
			}
			if affinity != "" {
				if s := mix(akey ^ e.hash); pref == nil || s > prefScore {
					pref, prefScore = e, s
				}
			}
		}
		if least == nil {
			continue
		}
		f.rr++
		if pref != nil && pref.inflight <= least.inflight+f.margin(least.inflight) {
			return pref
		}
		return least
	}
	for _, e := range f.eps {
		if e.healthy {
			return nil // healthy endpoints exist but are full: wait
		}
	}
	var best *endpoint
	for _, e := range f.eps {
		if f.free(e) && (best == nil || e.lastFail.Before(best.lastFail)) {
			best = e
		}
	}
	return best
}

// inTier reports whether e may take a request in tier (pickLocked): it is
// healthy and has a free slot, and, in tiers 1 and 2, is not cooling
// down, and, in tier 1, was not tried by this request.
func (f *fleet) inTier(e *endpoint, tier int, tried []bool, now time.Time) bool {
	switch {
	case !e.healthy:
		return false
	case tier <= 2 && now.Before(e.coolUntil):
		return false
	case tier == 1 && tried[e.idx]:
		return false
	}
	return f.free(e)
}

// margin is how many more outstanding requests the affinity endpoint may
// have than the least loaded one: max(slack, least/4).
func (f *fleet) margin(least int) int {
	if m := least / 4; m > f.slack {
		return m
	}
	return f.slack
}

// release returns e's slot and records the attempt's outcome.
func (f *fleet) release(e *endpoint, err *inference.Error, retryAfter, took time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.inflight--
	now := f.now()
	if err == nil || err.Status != 0 {
		f.answered(e, took, now)
	}
	if e.inflight == 0 {
		e.busySince = time.Time{}
	}
	switch {
	case err == nil:
		e.consecFail = 0
		if !e.healthy {
			f.setHealthy(e, true, "a request succeeded")
		}
	case err.Class == inference.ClassCancelled:
		// The caller gave up; says nothing about the endpoint.
	default:
		e.failures++
		if err.Class == inference.ClassConnection || err.Class == inference.ClassServer {
			e.consecFail++
			e.lastFail = now
			if e.healthy && e.consecFail >= f.ejectK {
				f.setHealthy(e, false, fmt.Sprintf("%d consecutive failures, last: %s", e.consecFail, err.Msg))
			}
		}
	}
	if retryAfter > 0 {
		e.coolUntil = now.Add(retryAfter)
	}
	f.broadcast()
}

// setHealthy changes e's health; f.mu is held.
func (f *fleet) setHealthy(e *endpoint, ok bool, why string) {
	if e.healthy == ok {
		return
	}
	e.healthy = ok
	if ok {
		e.consecFail = 0
		e.silent = false
		f.unhealth--
		f.log("llm: endpoint %s back in (%s)", e.name, why)
	} else {
		f.unhealth++
		f.log("llm: endpoint %s taken out (%s)", e.name, why)
	}
	f.broadcast()
}

func (f *fleet) broadcast() {
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fleet) log(format string, args ...any) {
	if f.logf != nil {
		f.logf(format, args...)
	}
}

// hasAlternative reports whether a healthy endpoint other than e is not
// cooling down, so a retry need not wait out e's Retry-After.
func (f *fleet) hasAlternative(e *endpoint) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, o := range f.eps {
		if o != e && o.healthy && !now.Before(o.coolUntil) {
			return true
		}
	}
	return false
}

// unhealthy returns the endpoints currently out.
func (f *fleet) unhealthy() []*endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unhealth == 0 {
		return nil
	}
	var out []*endpoint
	now := f.now()
	for _, e := range f.eps {
		if !e.healthy && !now.Before(e.probeAfter) {
			out = append(out, e)
		}
	}
	return out
}

// countCanary counts a canary sent to e.
func (f *fleet) countCanary(e *endpoint) {
	f.mu.Lock()
	e.canaries++
	f.mu.Unlock()
}

// isSilent reports whether e is out as silent.
func (f *fleet) isSilent(e *endpoint) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return e.silent
}

func (f *fleet) markHealthy(e *endpoint, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setHealthy(e, true, why)
}

func (f *fleet) stats() []EndpointStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]EndpointStats, len(f.eps))
	now := f.now()
	for i, e := range f.eps {
		out[i] = EndpointStats{
			Endpoint: e.name, Requests: e.requests, Retries: e.retries, Failures: e.failures, Moved: e.moved, Canaries: e.canaries,
			InFlight: e.inflight, Healthy: e.healthy, ConsecutiveFailures: e.consecFail,
		}
		if left := e.coolUntil.Sub(now); left > 0 {
			out[i].RetryAfter = left
		}
	}
	return out
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix is splitmix64's finaliser: a well-spread score from a combined hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
