package runstats

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trajflow/trajflow/inference/cache"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/ratelimit"
	"github.com/trajflow/trajflow/runner/metrics"
)

// HostedStats are the figures of the hosted-API features: the response
// cache, the rate limiter and the Batch API.
type HostedStats struct {
	// CacheHits and CacheMisses count requests answered from
	// generate.cache and those sent (zero without a cache).
	CacheHits, CacheMisses int64
	// CacheHitTokens are the billed tokens of the answers given from
	// generate.cache: no request was sent for them, so the run's cost
	// leaves them out.
	CacheHitTokens metrics.Billed
	// RateLimitWaiting is the requests waiting for the rate limiter now;
	// RateLimitWait the time requests spent waiting, summed.
	RateLimitWaiting int
	RateLimitWait    time.Duration
	// RateLimitRefused counts the 429s the limited requests got, and
	// RateLimitResent those the limiter sent again.
	RateLimitRefused, RateLimitResent int64
	// Batches and BatchRequests are what this run submitted to the Batch
	// API; BatchesRecovered the earlier runs' batches it took up;
	// BatchPending the requests waiting for a batch now.
	Batches, BatchRequests, BatchesRecovered int64
	BatchPending                             int
}

// Parts are the figures a progress line shows, each a phrase; none for a
// feature the run does not use.
func (h HostedStats) Parts() []string {
	var out []string
	if h.RateLimitWaiting > 0 || h.RateLimitWait > 0 {
		// The waits of requests waiting at once add up: 36 s of a run
		// can hold 18 minutes of them. Summed, and said so.
		out = append(out, fmt.Sprintf("rate limit: %d waiting, %s of waits summed over requests", h.RateLimitWaiting, h.RateLimitWait.Round(time.Second)))
	}
	if h.CacheHits+h.CacheMisses > 0 {
		out = append(out, fmt.Sprintf("cache %d hits, %d misses", h.CacheHits, h.CacheMisses))
	}
	if h.Batches+h.BatchesRecovered > 0 || h.BatchPending > 0 {
		out = append(out, fmt.Sprintf("batches %d submitted, %d collected from earlier runs, %d requests waiting", h.Batches, h.BatchesRecovered, h.BatchPending))
	}
	return out
}

// HostedOf are the figures of a run's rate limiter, response cache and
// Batch API client, each nil when the run has none.
func HostedOf(limiter *ratelimit.Limiter, store *cache.Store, batch *openai.BatchClient) HostedStats {
	var s HostedStats
	if store != nil {
		st := store.Stats()
		s.CacheHits, s.CacheMisses = st.Hits, st.Misses
		s.CacheHitTokens = metrics.Billed{PromptTokens: st.HitPromptTokens, CachedPromptTokens: st.HitCachedPromptTokens, CompletionTokens: st.HitCompletionTokens}
	}
	if limiter != nil {
		st := limiter.Stats()
		s.RateLimitWaiting, s.RateLimitWait = st.Waiting, st.Waited
		s.RateLimitRefused, s.RateLimitResent = st.Refused, st.Resent
	}
	if batch != nil {
		st := batch.Stats()
		s.Batches, s.BatchRequests, s.BatchesRecovered, s.BatchPending = st.Batches, st.Requests, st.Recovered, st.Pending
	}
	return s
}

// hostedLines are the summary's lines of the hosted-API features.
func (s *Summary) hostedLines() string {
	var b strings.Builder
	h := s.Hosted
	if h.CacheHits+h.CacheMisses > 0 {
		fmt.Fprintf(&b, "response cache: %d hits, %d misses (requests sent)\n", h.CacheHits, h.CacheMisses)
	}
	if h.RateLimitWait > 0 || h.RateLimitRefused > 0 {
		fmt.Fprintf(&b, "rate limit: requests waited %s in all; %d answered 429, %d of them sent again\n", h.RateLimitWait.Round(time.Millisecond), h.RateLimitRefused, h.RateLimitResent)
	}
	if h.Batches+h.BatchesRecovered > 0 {
		fmt.Fprintf(&b, "batch API: %d batches submitted (%d requests), %d of earlier runs collected\n", h.Batches, h.BatchRequests, h.BatchesRecovered)
	}
	return b.String()
}

var (
	descCache    = prometheus.NewDesc("trajflow_cache_requests_total", "Requests looked up in generate.cache, by result (hit or miss).", []string{"result"}, nil)
	descRLWait   = prometheus.NewDesc("trajflow_rate_limit_wait_seconds_total", "Time requests spent waiting for the rate limiter (generate.rate_limit), summed.", nil, nil)
	descRLQueue  = prometheus.NewDesc("trajflow_rate_limit_waiting", "Requests waiting for the rate limiter now.", nil, nil)
	descRL429    = prometheus.NewDesc("trajflow_rate_limit_429_total", "429s the requests under generate.rate_limit got, by what the limiter did (resent: sent again once it had room; given_up: the row is rate_limited).", []string{"outcome"}, nil)
	descBatches  = prometheus.NewDesc("trajflow_batches_total", "Batch API batches this run submitted.", nil, nil)
	descBatchReq = prometheus.NewDesc("trajflow_batch_pending_requests", "Requests waiting for a Batch API batch's results now.", nil, nil)
	hostedDescs  = []*prometheus.Desc{descCache, descRLWait, descRLQueue, descRL429, descBatches, descBatchReq}
)

// collectHosted adds the hosted-API figures to a scrape.
func collectHosted(ch chan<- prometheus.Metric, h HostedStats) {
	ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(h.CacheHits), "hit")
	ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(h.CacheMisses), "miss")
	ch <- prometheus.MustNewConstMetric(descRLWait, prometheus.CounterValue, h.RateLimitWait.Seconds())
	ch <- prometheus.MustNewConstMetric(descRLQueue, prometheus.GaugeValue, float64(h.RateLimitWaiting))
	ch <- prometheus.MustNewConstMetric(descRL429, prometheus.CounterValue, float64(h.RateLimitResent), "resent")
	ch <- prometheus.MustNewConstMetric(descRL429, prometheus.CounterValue, float64(h.RateLimitRefused-h.RateLimitResent), "given_up")
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(h.Batches))
	ch <- prometheus.MustNewConstMetric(descBatchReq, prometheus.GaugeValue, float64(h.BatchPending))
}
