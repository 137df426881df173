package runner

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/cache"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/ratelimit"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/internal/metrics"
	"github.com/trajflow/trajflow/schema"
)

// hosted holds the decorators of the run's client and the Batch API
// client, for their figures: the rate limiter, the response cache and the
// Batch API client; each nil when the config has none.
type hosted struct {
	limiter *ratelimit.Limiter
	cache   *cache.Store
	batch   *openai.BatchClient
}

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
		out = append(out, fmt.Sprintf("rate limit: %d waiting, waited %s", h.RateLimitWaiting, h.RateLimitWait.Round(time.Second)))
	}
	if h.CacheHits+h.CacheMisses > 0 {
		out = append(out, fmt.Sprintf("cache %d hits, %d misses", h.CacheHits, h.CacheMisses))
	}
	if h.Batches+h.BatchesRecovered > 0 || h.BatchPending > 0 {
		out = append(out, fmt.Sprintf("batches %d submitted, %d collected from earlier runs, %d requests waiting", h.Batches, h.BatchesRecovered, h.BatchPending))
	}
	return out
}

func (h *hosted) stats() HostedStats {
	var s HostedStats
	if h.cache != nil {
		st := h.cache.Stats()
		s.CacheHits, s.CacheMisses = st.Hits, st.Misses
		s.CacheHitTokens = metrics.Billed{PromptTokens: st.HitPromptTokens, CachedPromptTokens: st.HitCachedPromptTokens, CompletionTokens: st.HitCompletionTokens}
	}
	if h.limiter != nil {
		st := h.limiter.Stats()
		s.RateLimitWaiting, s.RateLimitWait = st.Waiting, st.Waited
	}
	if h.batch != nil {
		st := h.batch.Stats()
		s.Batches, s.BatchRequests, s.BatchesRecovered, s.BatchPending = st.Batches, st.Requests, st.Recovered, st.Pending
	}
	return s
}

// limiterHook creates the rate limiter of generate.rate_limit (nil
// without one) and returns the HTTP client's response hook that feeds it
// every response's x-ratelimit-* and retry-after headers.
func (b *components) limiterHook() func(string, int, http.Header) {
	cfg := b.cfg
	if !cfg.Generate.RateLimit.Enabled() {
		return nil
	}
	if b.hosted.limiter == nil {
		b.hosted.limiter = ratelimit.New(cfg.Generate.RateLimit, nil, nil)
	}
	lim := b.hosted.limiter
	return func(_ string, _ int, h http.Header) { lim.Observe(h) }
}

// openBatch replaces the HTTP client with the Batch API client
// (generate.api: batch) once the endpoints passed the preflight: its state
// (the batches submitted) lives in the output directory, so only a run
// opens it; Validate's walk (dry) only checks the Batch API.
func (b *components) openBatch(ctx context.Context) error {
	cfg := b.cfg
	if cfg.Generate.API != "batch" || !b.httpEndpoints() {
		return nil
	}
	key := b.httpOptions().APIKey
	if err := openai.CheckBatchAPI(ctx, cfg.Generate.Config, key); err != nil {
		return err
	}
	if b.dry {
		return nil
	}
	stderr := b.opts.Stderr
	c, err := openai.NewBatch(ctx, cfg.Generate.Config, cfg.Generate.Batch, openai.BatchOptions{
		APIKey: key, StateFile: filepath.Join(cfg.Output.Dir, schema.BatchStateFile), RunID: cfg.Run.ID,
		Logf: func(format string, args ...any) { fmt.Fprintf(stderr, "trajflow: "+format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	b.hosted.batch = c
	b.Client = c
	b.closers = append(b.closers, c.Close)
	return nil
}

// decorate wraps the client in the rate limiter, the structured-output
// check and the response cache (outermost: a hit spends nothing of the
// rate limits). Validate's walk (dry) opens no cache: it writes nothing,
// and sends what it shows rather than answering it from the cache.
func (b *components) decorate(context.Context) error {
	cfg := b.cfg
	if cfg.Generate.RateLimit.Enabled() {
		if b.hosted.limiter == nil {
			b.hosted.limiter = ratelimit.New(cfg.Generate.RateLimit, nil, nil)
		}
		b.Client = ratelimit.Wrap(b.Client, b.hosted.limiter)
	}
	// Replies are checked against the structured output their request
	// asks for, and sent again when they fail (generate.invalid_retries):
	// inside the cache, so that a retry is sent rather than answered with
	// the reply that failed, and outside the rate limiter, which counts
	// the retries.
	b.Client = structured.Wrap(b.Client, cfg.Generate.Structured)
	if cfg.Generate.Cache != "" && !b.dry {
		store, err := cache.Open(cfg.Generate.Cache, cfg.Generate.CacheMaxBytes)
		if err != nil {
			return fmt.Errorf("generate.cache: %w", err)
		}
		b.hosted.cache = store
		stderr := b.opts.Stderr
		var warned atomic.Bool
		b.Client = cache.New(b.Client, store, cacheKey(cfg.Generate.Model, cfg.Generate.API), func(err error) {
			if warned.CompareAndSwap(false, true) {
				fmt.Fprintf(stderr, "trajflow: generate.cache: a response was not stored: %v\n", err)
			}
		})
	}
	return nil
}

// hostedStats are the hosted-API figures of the run's client; none before
// it is built.
func (r *run) hostedStats() HostedStats {
	if r.built == nil {
		return HostedStats{}
	}
	return r.built.hosted.stats()
}

// cacheKey hashes what a request sends: the model, the endpoint's API,
// the body as the HTTP client encodes it, and the sample.
func cacheKey(model, api string) cache.KeyFunc {
	if api == "batch" {
		api = "chat" // the Batch API's lines are chat requests
	}
	return func(req *inference.Request) (cache.Key, error) {
		r := *req
		if r.Model == "" {
			r.Model = model
		}
		body, err := openai.EncodeRequest(api, &r)
		if err != nil {
			return cache.Key{}, err
		}
		endpoint := api
		if r.PromptTokenIDs != nil {
			endpoint = "completions"
		}
		return cache.KeyOf([]byte(r.Model), []byte(endpoint), body, []byte(r.Sample)), nil
	}
}

// hostedLines are the summary's lines of the hosted-API features.
func (s *Summary) hostedLines() string {
	var b strings.Builder
	h := s.Hosted
	if h.CacheHits+h.CacheMisses > 0 {
		fmt.Fprintf(&b, "response cache: %d hits, %d misses (requests sent)\n", h.CacheHits, h.CacheMisses)
	}
	if h.RateLimitWait > 0 {
		fmt.Fprintf(&b, "rate limit: requests waited %s in all\n", h.RateLimitWait.Round(time.Millisecond))
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
	descBatches  = prometheus.NewDesc("trajflow_batches_total", "Batch API batches this run submitted.", nil, nil)
	descBatchReq = prometheus.NewDesc("trajflow_batch_pending_requests", "Requests waiting for a Batch API batch's results now.", nil, nil)
	hostedDescs  = []*prometheus.Desc{descCache, descRLWait, descRLQueue, descBatches, descBatchReq}
)

// collectHosted adds the hosted-API figures to a scrape.
func collectHosted(ch chan<- prometheus.Metric, h HostedStats) {
	ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(h.CacheHits), "hit")
	ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(h.CacheMisses), "miss")
	ch <- prometheus.MustNewConstMetric(descRLWait, prometheus.CounterValue, h.RateLimitWait.Seconds())
	ch <- prometheus.MustNewConstMetric(descRLQueue, prometheus.GaugeValue, float64(h.RateLimitWaiting))
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(h.Batches))
	ch <- prometheus.MustNewConstMetric(descBatchReq, prometheus.GaugeValue, float64(h.BatchPending))
}

// httpClient is the run's HTTP client, for its endpoints' figures; nil
// for the simulator, an embedder's client, or before the client is built.
func (r *run) httpClient() *openai.HTTPClient {
	if r.built == nil {
		return nil
	}
	return r.built.http
}
