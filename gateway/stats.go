package gateway

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Stats are a Server's counters, for metrics.
type Stats struct {
	// Calls is the number of calls that reached a Model (answered or
	// failed).
	Calls int64
	// Refused is the number of requests the gateway refused before any
	// Model saw them (unknown or ended session, wrong key, bad route or
	// method, a body too large or malformed, unsupported parameters).
	Refused int64
	// Errors is the number of calls a Model failed (its error, or an
	// answer that could not be sent in the API's shape).
	Errors int64
	// SessionsOpened is the number of sessions ever opened;
	// SessionsOpen those not ended yet.
	SessionsOpened int64
	SessionsOpen   int64
	// AddedLatency is the gateway's own time per answered call: the
	// handler's time less the time inside Model.Call.
	AddedLatency LatencySummary
	// ByAPI is the number of Calls per API (AgentChat, AgentResponses,
	// AgentMessages).
	ByAPI map[string]int64
}

// LatencySummary summarises durations recorded in a fixed-bucket
// histogram: P50 and P99 are the upper bounds of their buckets (buckets
// grow by a factor of 2^(1/4), about 19%, from 1µs), Mean is exact.
type LatencySummary struct {
	Count          int64
	Mean, P50, P99 time.Duration
}

// Stats returns the server's counters now.
func (s *Server) Stats() Stats {
	st := Stats{
		Calls:          s.stats.calls.Load(),
		Refused:        s.stats.refused.Load(),
		Errors:         s.stats.errors.Load(),
		SessionsOpened: s.stats.sessionsOpened.Load(),
		SessionsOpen:   s.stats.sessionsOpen.Load(),
		AddedLatency:   s.stats.added.summary(),
		ByAPI:          map[string]int64{},
	}
	for _, api := range []string{AgentChat, AgentResponses, AgentMessages} {
		st.ByAPI[api] = s.stats.byAPI(api).Load()
	}
	return st
}

type stats struct {
	calls, refused, errors       atomic.Int64
	sessionsOpened, sessionsOpen atomic.Int64
	chat, responses, messages    atomic.Int64
	added                        histogram
}

func (s *stats) byAPI(api string) *atomic.Int64 {
	switch api {
	case AgentChat:
		return &s.chat
	case AgentResponses:
		return &s.responses
	default:
		return &s.messages
	}
}

// histogram buckets: bucket i holds durations up to bucketBound(i);
// the last holds everything longer.
const nBuckets = 120 // 1µs·2^(119/4) ≈ 15 min

func bucketBound(i int) time.Duration {
	return time.Duration(float64(time.Microsecond) * math.Pow(2, float64(i)/4))
}

type histogram struct {
	mu     sync.Mutex
	counts [nBuckets]int64
	n      int64
	sum    time.Duration
}

func (h *histogram) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	if d > time.Microsecond {
		i = int(math.Ceil(4 * math.Log2(float64(d)/float64(time.Microsecond))))
		if i >= nBuckets {
			i = nBuckets - 1
		}
	}
	h.mu.Lock()
	h.counts[i]++
	h.n++
	h.sum += d
	h.mu.Unlock()
}

func (h *histogram) summary() LatencySummary {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return LatencySummary{}
	}
	q := func(p float64) time.Duration {
		rank := int64(math.Ceil(p * float64(h.n)))
		var c int64
		for i, n := range h.counts {
			c += n
			if c >= rank {
				return bucketBound(i)
			}
		}
		return bucketBound(nBuckets - 1)
	}
	return LatencySummary{Count: h.n, Mean: h.sum / time.Duration(h.n), P50: q(0.5), P99: q(0.99)}
}
