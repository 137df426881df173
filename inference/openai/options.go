package openai

import (
	"context"
	"net/http"
	"time"

	"github.com/trajflow/trajflow/inference"
)

// HTTPOptions are the HTTP client's settings that do not come from the
// config file. Zero values take the documented defaults.
type HTTPOptions struct {
	// APIKey is sent as "Authorization: Bearer KEY" (the caller reads it from
	// the variable named by generate.api_key_env). It is never logged and
	// never appears in errors.
	APIKey string
	// HTTPClient sends the requests. Default: a client with its own
	// transport sized for generate.concurrency, closed by Close.
	HTTPClient *http.Client
	// Logf receives endpoint health changes and retries. Default: silent.
	Logf func(format string, args ...any)
	// HealthLogf, when set, receives the endpoint health changes alone
	// (an endpoint taken out, silent or failing, and back in) in place of
	// Logf: a run prints them, not every retry.
	HealthLogf func(format string, args ...any)
	// SilenceAfter is the least time an endpoint may hold requests without
	// answering any while the other endpoints answer (or answered since
	// and are done), before it is taken
	// out as silent and its requests move to the others (the time is
	// twice the fleet's longest recent answer time when that is longer).
	// Default 30s.
	SilenceAfter time.Duration
	// EjectAfter is the number of consecutive connection or 5xx failures
	// that take an endpoint out of the fleet. Default 3.
	EjectAfter int
	// ProbeInterval is how often endpoints that are out are probed
	// (GET {base}/models, then {root}/health). Default 2s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default 5s.
	ProbeTimeout time.Duration
	// AffinitySlack is the least margin by which an affinity endpoint's
	// outstanding requests may exceed the least loaded endpoint's before a
	// request goes to the least loaded instead; the margin is
	// max(AffinitySlack, least/4). Default 8.
	AffinitySlack int
	// MaxRetryAfter caps a server's Retry-After. Default 60s.
	MaxRetryAfter time.Duration
	// MaxResponseBytes bounds a response body. Default 256 MiB.
	MaxResponseBytes int64
	// LargeBodyBytes bounds the bytes of large response bodies (over 4
	// MiB) read and decoded at once, whatever the concurrency: a large
	// body waits until the others leave room (a body over the bound
	// waits to be alone). Default 1 GiB.
	LargeBodyBytes int64
	// BreakAfter is the number of consecutive attempts failing for a cause
	// no retry fixes (401, 403, 404, connection refused), on every
	// endpoint, that opens the circuit breaker: every request then fails at
	// once. Default DefaultBreakAfter; negative: no breaker.
	BreakAfter int
	// OnBreak is called once, when the breaker opens, with its error (which
	// names the cause). A run stops on it.
	OnBreak func(err error)
	// OnAttempt, when set, is told of every HTTP attempt once its outcome
	// is known: the endpoint, how long it took, its error (nil on
	// success) and whether the client tries again (metrics).
	OnAttempt func(endpoint string, took time.Duration, err *inference.Error, retrying bool)
	// OnResponse, when set, sees the status and headers of every HTTP
	// response a generation attempt got, before its body is read: the rate
	// limiter reads x-ratelimit-* and Retry-After from them.
	OnResponse func(endpoint string, status int, header http.Header)
	// ReturnRateLimited returns a 429 at once instead of retrying it: the
	// rate limiter (generate.rate_limit) sends it again once it has room.
	ReturnRateLimited bool
	// KeepBody keeps each reply's body as the server sent it
	// (inference.Response.Raw, bounded by MaxResponseBytes) and its
	// x-request-id (RequestID): the OpenAI Batch output
	// (output.openai_batch) writes them.
	KeepBody bool
	// LearnContext learns each endpoint's context length after its first
	// chat answer, where the server publishes it (vLLM's /v1/models,
	// Ollama's /api/ps and /api/show; learnContext), for MaxModelLen: a
	// few GETs once per endpoint. trajflow run sets it.
	LearnContext bool
	// Now and Sleep replace the clock and the backoff sleep (tests).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// setDefaults fills the options left zero with the documented defaults.
func (o *HTTPOptions) setDefaults() {
	if o.EjectAfter <= 0 {
		o.EjectAfter = 3
	}
	if o.SilenceAfter <= 0 {
		o.SilenceAfter = 30 * time.Second
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 2 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.AffinitySlack <= 0 {
		o.AffinitySlack = 8
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = time.Minute
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 256 << 20
	}
	if o.LargeBodyBytes <= 0 {
		o.LargeBodyBytes = 1 << 30
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	if o.BreakAfter == 0 {
		o.BreakAfter = DefaultBreakAfter
	}
}
