package build

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/cache"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/ratelimit"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/runner/runstats"
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

// limiterHook creates the rate limiter of generate.rate_limit (nil
// without one) and returns the HTTP client's response hook that feeds it
// every response's x-ratelimit-* and retry-after headers.
func (b *Components) limiterHook() func(string, int, http.Header) {
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
func (b *Components) openBatch(ctx context.Context) error {
	cfg := b.cfg
	if !cfg.Generate.API.Batch() || !b.HTTPEndpoints() {
		return nil
	}
	key := b.httpOptions().APIKey
	if err := openai.CheckBatchAPI(ctx, cfg.Generate.Config, key); err != nil {
		return err
	}
	stderr := b.opts.Stderr
	if w := batchSizeWarning(cfg.Generate.Concurrency, cfg.Generate.Batch); w != "" {
		fmt.Fprintln(stderr, w)
	}
	if b.opts.Dry {
		return nil
	}
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

// batchSizeWarning is the warning of generate.api: batch under a
// generate.concurrency below generate.batch.max_requests: a batch holds
// at most the requests in flight, and the next waits for its results, so
// a run of more requests than that sends small batches one after another,
// each up to the completion window; "" when concurrency allows whole
// batches.
func batchSizeWarning(concurrency int, bc openai.BatchConfig) string {
	if concurrency >= bc.MaxRequests {
		return ""
	}
	return fmt.Sprintf("trajflow: warning: generate.api: batch holds at most generate.concurrency (%d) requests in a batch, and the next batch waits for its results (up to completion_window %s each): a run of more requests sends batches of %d one after another. Set generate.concurrency to the requests you want in one batch, e.g. the rows × repeat.n, up to generate.batch.max_requests (%d)",
		concurrency, bc.CompletionWindow, concurrency, bc.MaxRequests)
}

// decorate wraps the client in the rate limiter, the structured-output
// check and the response cache (outermost: a hit spends nothing of the
// rate limits). Validate's walk (dry) opens no cache: it writes nothing,
// and sends what it shows rather than answering it from the cache.
func (b *Components) decorate(context.Context) error {
	cfg := b.cfg
	if cfg.Generate.RateLimit.Enabled() {
		if b.hosted.limiter == nil {
			b.hosted.limiter = ratelimit.New(cfg.Generate.RateLimit, nil, nil)
		}
		b.Client = ratelimit.WrapDeadline(b.Client, b.hosted.limiter, cfg.Generate.Deadline.D())
	}
	// Replies are checked against the structured output their request
	// asks for, and sent again when they fail (generate.invalid_retries):
	// inside the cache, so that a retry is sent rather than answered with
	// the reply that failed, and outside the rate limiter, which counts
	// the retries.
	b.Client = structured.Wrap(b.Client, cfg.Generate.Structured)
	if cfg.Generate.Cache != "" && !b.opts.Dry {
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

// cacheKey hashes what a request sends: the model, the endpoint's API,
// the body as the HTTP client encodes it, and the sample.
func cacheKey(model string, api inference.API) cache.KeyFunc {
	api = api.Body() // the Batch API's lines are chat requests
	return func(req *inference.Request) (cache.Key, error) {
		r := *req
		if r.Model == "" {
			r.Model = model
		}
		// The scheduling priority changes when a reply comes, not what it
		// holds.
		r.Priority = nil
		body, err := openai.EncodeRequest(api, &r)
		if err != nil {
			return cache.Key{}, err
		}
		if r.RoutedExperts {
			// vLLM's body does not say it: an answer stored by a run that
			// did not ask for routes has none to give.
			body = fmt.Appendf(body, "\x00routed_experts:%d", r.RoutedExpertsLayers)
		}
		endpoint := api
		if r.PromptTokenIDs != nil {
			endpoint = api.TokenAPI()
		}
		// Token-id prompts are keyed by the endpoint they go to
		// (Caps.TokenAPI): generate.api: sglang's, on /generate, apart
		// from the same prompt on /v1/completions (the body is the
		// completions encoding, which holds every param; /generate's own
		// carries a fresh rid a request).
		return cache.KeyOf([]byte(r.Model), []byte(endpoint), body, []byte(r.Sample)), nil
	}
}

// Hosted are the figures of the client's decorators and Batch API client
// (runstats.HostedOf).
func (b *Components) Hosted() runstats.HostedStats {
	return runstats.HostedOf(b.hosted.limiter, b.hosted.cache, b.hosted.batch)
}

// HTTP is the config's HTTP client, for its endpoints' figures; nil for
// the simulator or an embedder's client.
func (b *Components) HTTP() *openai.HTTPClient { return b.http }
