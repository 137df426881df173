package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
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

// HTTPClient is the OpenAI-compatible client over a fleet of endpoints. It
// is safe for concurrent use.
type HTTPClient struct {
	cfg     inference.Config
	opts    HTTPOptions
	client  *http.Client
	owned   *http.Transport // closed by Close when the client built it
	fleet   *fleet
	sem     chan struct{}
	path    string // /chat/completions or /completions: requests without token ids
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
	bufPool sync.Pool
	brk     *breaker // nil: none
	large   *bodyGate
	// maxModelLen is the smallest context length a server reported
	// (/tokenize's max_model_len, learnContext); 0: none reported yet.
	maxModelLen atomic.Int64
	// learn is each endpoint's learnContext state, by name.
	learnMu sync.Mutex
	learn   map[string]*ctxLearn
	// rids are generate.api: sglang's requests in flight (sglang.go).
	rids ridSet
	// noPriority is set once a server refused a request's priority
	// (generate.priority: auto): no request carries one after that.
	noPriority atomic.Bool
}

var (
	_ inference.Client         = (*HTTPClient)(nil)
	_ inference.ContextLimiter = (*HTTPClient)(nil)
)

// MaxModelLen is the model's context length as the servers reported it
// (the smallest, for a fleet): /tokenize's max_model_len, or, learnt
// after an endpoint's first chat answer, vLLM's /v1/models or Ollama's
// /api/ps and /api/show (learnContext); 0 before one did.
func (c *HTTPClient) MaxModelLen() int { return int(c.maxModelLen.Load()) }

// noteMaxModelLen records a max_model_len a server reported.
func (c *HTTPClient) noteMaxModelLen(n int64) {
	for n > 0 {
		cur := c.maxModelLen.Load()
		if cur != 0 && cur <= n || c.maxModelLen.CompareAndSwap(cur, n) {
			return
		}
	}
}

// bodyGate bounds the bytes of large response bodies held at once.
type bodyGate struct {
	sem  *semaphore.Weighted
	max  int64
	held atomic.Int64 // bytes acquired now
	peak atomic.Int64 // the most held at once
}

func newBodyGate(max int64) *bodyGate {
	return &bodyGate{sem: semaphore.NewWeighted(max), max: max}
}

// acquire waits until n bytes (at most the whole bound) are free and
// returns the function giving them back.
func (g *bodyGate) acquire(ctx context.Context, n int64) (release func(), err error) {
	n = min(n, g.max)
	if err := g.sem.Acquire(ctx, n); err != nil {
		return func() {}, err
	}
	h := g.held.Add(n)
	for p := g.peak.Load(); h > p && !g.peak.CompareAndSwap(p, h); p = g.peak.Load() {
	}
	return func() {
		g.held.Add(-n)
		g.sem.Release(n)
	}, nil
}

// maxPooledBuffer is the largest response buffer kept for reuse.
const maxPooledBuffer = 4 << 20

// errDeadline is the cause of a request's overall deadline (generate.deadline).
var errDeadline = errors.New("generate.deadline exceeded")

// NewHTTP builds a client for cfg's endpoints and starts its health prober.
// Errors name the generate.* key at fault.
func NewHTTP(cfg inference.Config, opts HTTPOptions) (*HTTPClient, error) {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if len(cfg.Endpoints) == 0 {
		bad("generate.endpoints", "at least one endpoint is required")
	}
	var eps []*endpoint
	seen := map[string]int{}
	for i, raw := range cfg.Endpoints {
		base, root, name, err := normaliseEndpoint(raw)
		if err != nil {
			bad(fmt.Sprintf("generate.endpoints[%d]", i), "%v", err)
			continue
		}
		if j, dup := seen[base]; dup {
			bad(fmt.Sprintf("generate.endpoints[%d]", i), "%s repeats generate.endpoints[%d]", name, j)
			continue
		}
		seen[base] = i
		eps = append(eps, &endpoint{idx: len(eps), base: base, root: root, name: name})
	}
	var path string
	switch cfg.API {
	case "", inference.APIChat, inference.APITokens, inference.APIBatch, inference.APISGLang:
		// batch: the Batch API client sends batches; this client's chat
		// requests serve trajflow validate's checks. sglang: token-id
		// prompts go to the native /generate (sglang.go).
		path = "/chat/completions"
	case inference.APICompletions:
		path = "/completions"
	default:
		bad("generate.api", "%q is not one of chat, completions, tokens, batch, sglang", cfg.API)
	}
	if cfg.Model == "" {
		bad("generate.model", "required")
	}
	if cfg.Concurrency < 1 {
		bad("generate.concurrency", "must be >= 1, got %d", cfg.Concurrency)
	}
	if cfg.EndpointConcurrency < 0 {
		bad("generate.endpoint_concurrency", "must be >= 0, got %d", cfg.EndpointConcurrency)
	}
	if cfg.MaxAttempts < 1 {
		bad("generate.max_attempts", "must be >= 1, got %d", cfg.MaxAttempts)
	}
	if cfg.Timeout < 0 {
		bad("generate.timeout", "must be >= 0, got %s", cfg.Timeout.D())
	}
	if cfg.Deadline < 0 {
		bad("generate.deadline", "must be >= 0, got %s", cfg.Deadline.D())
	}
	if cfg.BackoffBase < 0 {
		bad("generate.backoff_base", "must be >= 0, got %s", cfg.BackoffBase.D())
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		bad("generate.backoff_max", "must be >= generate.backoff_base (%s), got %s", cfg.BackoffBase.D(), cfg.BackoffMax.D())
	}
	if s, ok := cfg.Params["stream"].(bool); ok && s {
		bad("generate.params.stream", "streaming is not supported (trajflow reads whole responses); remove the key")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	if opts.EjectAfter <= 0 {
		opts.EjectAfter = 3
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 2 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.AffinitySlack <= 0 {
		opts.AffinitySlack = 8
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = time.Minute
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 256 << 20
	}
	if opts.LargeBodyBytes <= 0 {
		opts.LargeBodyBytes = 1 << 30
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleepCtx
	}
	c := &HTTPClient{
		cfg:   cfg,
		opts:  opts,
		sem:   make(chan struct{}, cfg.Concurrency),
		path:  path,
		large: newBodyGate(opts.LargeBodyBytes),
	}
	c.bufPool.New = func() any { return new(bytes.Buffer) }
	c.client = opts.HTTPClient
	if c.client == nil {
		c.owned = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   cfg.Concurrency,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		c.client = &http.Client{Transport: c.owned, CheckRedirect: noRedirect}
	}
	c.fleet = newFleet(eps, cfg.EndpointConcurrency, opts.AffinitySlack, opts.EjectAfter, opts.Now, opts.Logf)
	if opts.BreakAfter == 0 {
		opts.BreakAfter = DefaultBreakAfter
	}
	if opts.BreakAfter > 0 {
		c.brk = newBreaker(opts.BreakAfter, len(eps), opts.OnBreak)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.wg.Add(1)
	go c.probeLoop(ctx)
	return c, nil
}

// Close stops the health prober and closes idle connections. Requests in
// flight are not interrupted; Complete after Close fails.
func (c *HTTPClient) Close() {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return
	}
	c.closed = true
	c.closeMu.Unlock()
	c.stop()
	c.wg.Wait()
	if c.owned != nil {
		c.owned.CloseIdleConnections()
	}
}

// Stats returns each endpoint's counters, in generate.endpoints order.
func (c *HTTPClient) Stats() []EndpointStats { return c.fleet.stats() }

// Complete sends req to an endpoint of the fleet, retrying as configured.
// A failure is an *Error with its class, or the context's error when ctx
// ends first.
func (c *HTTPClient) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	c.closeMu.Lock()
	closed := c.closed
	c.closeMu.Unlock()
	if closed {
		return nil, errors.New("llm: client is closed")
	}
	if req == nil {
		return nil, errors.New("llm: nil request")
	}
	if err := c.brk.open(); err != nil {
		return nil, brokenError(err)
	}
	if req.Model == "" {
		r := *req
		r.Model = c.cfg.Model
		req = &r
	}
	if req.Priority != nil && (c.cfg.Priority == inference.PriorityOff || c.noPriority.Load()) {
		r := *req
		r.Priority = nil
		req = &r
	}
	api := c.cfg.API
	if api == inference.APISGLang && req.API == "" && req.PromptTokenIDs != nil {
		return c.completeSGLang(ctx, req)
	}
	path := c.path
	switch req.API {
	case inference.APIChat:
		api, path = req.API, "/chat/completions"
	case inference.APICompletions:
		api, path = req.API, completionsPath
	}
	body, err := encodeRequest(api, req)
	if err != nil {
		return nil, err
	}
	if req.PromptTokenIDs != nil {
		path = completionsPath
	}
	var resp *inference.Response
	ep, err := c.do(ctx, req.Affinity, func(ep *endpoint) string { return ep.base + path }, body, func(data []byte, h http.Header) error {
		var err error
		resp, err = decodeResponse(data)
		if err == nil && c.opts.KeepBody {
			resp.Raw = bytes.Clone(data)
			resp.RequestID = h.Get("X-Request-Id")
		}
		return err
	})
	if err != nil && req.Priority != nil && priorityRefused(err) {
		// A server without priority scheduling (vLLM's default FCFS
		// policy refuses a priority other than 0; a hosted API an
		// unknown argument): send none from now on, this one again.
		if !c.noPriority.Swap(true) && c.opts.Logf != nil {
			c.opts.Logf("generate: the server refused the request priority (%v); requests go without it (generate.priority: off silences this)", err)
		}
		r := *req
		r.Priority = nil
		return c.Complete(ctx, &r)
	}
	if err != nil {
		var e *inference.Error
		if req.PromptTokenIDs != nil && errors.As(err, &e) && e.Class == inference.ClassHTTP && (e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusNotFound) {
			e.Msg += " (generate.api: tokens sends token-id prompts to /v1/completions; a server that does not take them needs generate.api: chat)"
		}
		return nil, err
	}
	resp.Endpoint = ep
	if req.PromptTokenIDs == nil && c.opts.LearnContext {
		// A chat answer: the context length, where the server publishes
		// it, tells a prompt the server cut (Ollama answers 200 with
		// prompt_tokens at its context) from one it took whole.
		c.learnContext(ctx, ep)
	}
	return resp, nil
}

// priorityRefused reports whether err is a server's refusal of the
// request's priority field: a 400 or 422 whose message names it (vLLM:
// "Got priority 3 but Priority scheduling is not enabled."; OpenAI:
// "Unrecognized request argument supplied: priority").
func priorityRefused(err error) bool {
	var e *inference.Error
	return errors.As(err, &e) && e.Class == inference.ClassHTTP &&
		(e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity) &&
		strings.Contains(strings.ToLower(e.Msg), "priority")
}

// completionsPath is where token-id prompts go.
const completionsPath = "/completions"

// Tokenize renders and tokenizes req's messages with the server's chat
// template: POST {root}/tokenize as vLLM and SGLang serve it
// ({"model", "messages", "tools", "add_generation_prompt",
// "add_special_tokens": false, and req.TemplateArgs} → {"tokens": [...],
// "count": N}; with req.Raw, {"model", "prompt", "add_special_tokens":
// false}). It
// retries and fails like Complete; a server without the endpoint fails
// with an error that says to use generate.api: chat.
func (c *HTTPClient) Tokenize(ctx context.Context, req *inference.TokenizeRequest) ([]int32, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	model := req.Model
	if model == "" {
		model = c.cfg.Model
	}
	w := map[string]any{"model": model, "messages": toWireMessages(req.Messages), "add_generation_prompt": req.AddGenerationPrompt, "add_special_tokens": false}
	if len(req.Tools) > 0 {
		w["tools"] = req.Tools
	}
	for k, v := range req.TemplateArgs {
		w[k] = v // the row's or config's chat_template_kwargs, add_special_tokens, ...
	}
	if req.Raw {
		w = map[string]any{"model": model, "prompt": req.Text, "add_special_tokens": false}
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("llm: encode tokenize body: %w", err)
	}
	var ids []int32
	_, err = c.do(ctx, req.Affinity, func(ep *endpoint) string { return ep.root + "/tokenize" }, body, func(data []byte, _ http.Header) error {
		var r struct {
			Tokens      *[]int32 `json:"tokens"`
			MaxModelLen int64    `json:"max_model_len"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return err
		}
		if r.Tokens == nil {
			return errors.New(`no "tokens" in the /tokenize response`)
		}
		ids = *r.Tokens
		c.noteMaxModelLen(r.MaxModelLen)
		return nil
	})
	if err != nil {
		var e *inference.Error
		if errors.As(err, &e) && e.Class == inference.ClassHTTP && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed) {
			e.Msg += " (this server has no POST /tokenize; generate.api: tokens and sglang need a server that tokenizes chat messages, such as vLLM or SGLang: use generate.api: chat)"
		}
		return nil, err
	}
	return ids, nil
}

// Detokenize spells ids with the server's tokenizer: POST
// {root}/detokenize as vLLM and SGLang serve it ({"model", "tokens"} →
// {"prompt"}). It retries and fails like Complete.
func (c *HTTPClient) Detokenize(ctx context.Context, model string, ids []int32) (string, error) {
	if err := c.checkOpen(); err != nil {
		return "", err
	}
	if model == "" {
		model = c.cfg.Model
	}
	body, err := json.Marshal(map[string]any{"model": model, "tokens": ids})
	if err != nil {
		return "", fmt.Errorf("llm: encode detokenize body: %w", err)
	}
	var text string
	_, err = c.do(ctx, "", func(ep *endpoint) string { return ep.root + "/detokenize" }, body, func(data []byte, _ http.Header) error {
		var r struct {
			Prompt *string `json:"prompt"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			return err
		}
		if r.Prompt == nil {
			return errors.New(`no "prompt" in the /detokenize response`)
		}
		text = *r.Prompt
		return nil
	})
	return text, err
}

func (c *HTTPClient) checkOpen() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return errors.New("llm: client is closed")
	}
	return nil
}

// do sends body to an endpoint of the fleet (url gives the address on
// it), retrying as configured, and hands a 2xx body to decode. It returns
// the name of the endpoint that answered. A failure is an *Error with its
// class, or the context's error when ctx ends first.
func (c *HTTPClient) do(ctx context.Context, affinity string, url func(*endpoint) string, body []byte, decode func([]byte, http.Header) error) (string, error) {
	if d := c.cfg.Deadline.D(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errDeadline)
		defer cancel()
	}
	tried := make([]bool, len(c.fleet.eps))
	var last *inference.Error
	for attempt := 1; ; attempt++ {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return "", c.ctxErr(ctx, last, attempt-1)
		}
		ep, err := c.fleet.acquire(ctx, affinity, tried, attempt > 1)
		if err != nil {
			<-c.sem
			return "", c.ctxErr(ctx, last, attempt-1)
		}
		start := c.opts.Now()
		aerr, retryAfter := c.attempt(ctx, ep, url(ep), body, decode)
		took := c.opts.Now().Sub(start)
		observe := func(retrying bool) {
			if c.opts.OnAttempt != nil {
				c.opts.OnAttempt(ep.name, took, aerr, retrying)
			}
		}
		if aerr != nil && c.opts.APIKey != "" {
			// A server may echo the request's headers back.
			aerr.Msg = strings.ReplaceAll(aerr.Msg, c.opts.APIKey, "[redacted]")
		}
		if aerr != nil && ctx.Err() != nil {
			// The caller's cancel or the overall deadline, not the endpoint's fault.
			c.fleet.release(ep, &inference.Error{Class: inference.ClassCancelled}, 0)
			<-c.sem
			observe(false)
			return "", c.ctxErr(ctx, last, attempt)
		}
		c.fleet.release(ep, aerr, retryAfter)
		<-c.sem
		broken := c.brk.record(ep.idx, aerr)
		if aerr == nil {
			observe(false)
			return ep.name, nil
		}
		tried[ep.idx] = true
		last = aerr
		if !retryable(aerr.Class) || aerr.Class == inference.ClassRateLimited && c.opts.ReturnRateLimited {
			observe(false)
			return "", aerr
		}
		if broken != nil {
			observe(false)
			return "", brokenError(broken)
		}
		if attempt >= c.cfg.MaxAttempts {
			observe(false)
			aerr.Msg = fmt.Sprintf("%s (after %d attempts)", aerr.Msg, attempt)
			return "", aerr
		}
		wait := c.backoff(attempt)
		if retryAfter > wait && !c.fleet.hasAlternative(ep) {
			wait = retryAfter
		}
		if dl, ok := ctx.Deadline(); ok && c.opts.Now().Add(wait).After(dl) {
			observe(false)
			aerr.Msg = fmt.Sprintf("%s (after %d attempts; no time left to retry)", aerr.Msg, attempt)
			return "", aerr
		}
		observe(true)
		if c.opts.Logf != nil {
			c.opts.Logf("llm: attempt %d on %s failed (%s); retrying in %s", attempt, ep.name, aerr.Error(), wait.Round(time.Millisecond))
		}
		if err := c.opts.Sleep(ctx, wait); err != nil {
			return "", c.ctxErr(ctx, last, attempt)
		}
	}
}

// ctxErr is the error of a request whose context ended: a timeout *Error
// for generate.deadline, else the context's own error (cancelled).
func (c *HTTPClient) ctxErr(ctx context.Context, last *inference.Error, attempts int) error {
	if errors.Is(context.Cause(ctx), errDeadline) {
		msg := fmt.Sprintf("generate.deadline (%s) exceeded after %d attempts", c.cfg.Deadline.D(), attempts)
		if last != nil {
			msg += "; last error: " + last.Error()
		}
		return &inference.Error{Class: inference.ClassTimeout, Msg: msg}
	}
	return fmt.Errorf("llm: request abandoned after %d attempts: %w", attempts, ctx.Err())
}

func retryable(class string) bool {
	switch class {
	case inference.ClassRateLimited, inference.ClassServer, inference.ClassConnection, inference.ClassTimeout, inference.ClassBadResponse:
		return true
	}
	return false
}

// backoff is full jitter: uniform in [0, min(max, base·2^(attempt-1))].
func (c *HTTPClient) backoff(attempt int) time.Duration {
	base, max := c.cfg.BackoffBase.D(), c.cfg.BackoffMax.D()
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// attempt sends body to u on ep once and decodes a 2xx body. It returns
// the attempt's classified error and the server's Retry-After (0 when
// none), or nil.
func (c *HTTPClient) attempt(ctx context.Context, ep *endpoint, u string, body []byte, decode func([]byte, http.Header) error) (*inference.Error, time.Duration) {
	// where names the URL requested, as errors show it: the endpoint's
	// name and the path under the base URL, or, for a path under the
	// server's root (/tokenize, /generate), the root's.
	where := ep.name + strings.TrimPrefix(u, ep.base)
	if !strings.HasPrefix(u, ep.base) {
		where = pipeline.RedactURL(u)
	}
	if t := c.cfg.Timeout.D(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return &inference.Error{Class: inference.ClassConnection, Msg: fmt.Sprintf("%s: %v", ep.name, err)}, 0
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if c.opts.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	hresp, err := c.client.Do(hreq)
	if err != nil {
		return c.transportError(ctx, ep, err), 0
	}
	defer func() { _ = hresp.Body.Close() }() // best effort: a response body, read
	if c.opts.OnResponse != nil {
		c.opts.OnResponse(ep.name, hresp.StatusCode, hresp.Header)
	}
	buf := c.bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		// A large body's buffer is not kept: the pool would hold one per
		// request in flight.
		if buf.Cap() <= maxPooledBuffer {
			c.bufPool.Put(buf)
		}
	}()
	if hresp.ContentLength > c.opts.MaxResponseBytes {
		// Refused before a byte of it is read.
		return &inference.Error{Class: inference.ClassBadResponse, Status: hresp.StatusCode, Msg: fmt.Sprintf("%s: response body of %d bytes, over %d", ep.name, hresp.ContentLength, c.opts.MaxResponseBytes)}, 0
	}
	// A large body waits its turn: bodies held at once while read and
	// decoded stay within LargeBodyBytes, whatever the concurrency.
	release := func() {}
	defer func() { release() }()
	if hresp.ContentLength > maxPooledBuffer {
		if release, err = c.large.acquire(ctx, hresp.ContentLength); err != nil {
			return c.transportError(ctx, ep, err), 0
		}
	}
	if hresp.ContentLength > 0 {
		// Sized once: a buffer grown by doubling may reach twice the body.
		buf.Grow(int(hresp.ContentLength) + bytes.MinRead)
	}
	rd := io.LimitReader(hresp.Body, c.opts.MaxResponseBytes+1)
	if hresp.ContentLength < 0 {
		// Length unknown: the first part is read at once, the rest
		// once it has its turn.
		_, err = buf.ReadFrom(io.LimitReader(rd, maxPooledBuffer+1))
		if err == nil && buf.Len() > maxPooledBuffer {
			release, err = c.large.acquire(ctx, c.opts.MaxResponseBytes)
		}
	}
	if err == nil {
		_, err = buf.ReadFrom(rd)
	}
	if err != nil {
		return c.transportError(ctx, ep, err), 0
	}
	if int64(buf.Len()) > c.opts.MaxResponseBytes {
		return &inference.Error{Class: inference.ClassBadResponse, Status: hresp.StatusCode, Msg: fmt.Sprintf("%s: response body over %d bytes", ep.name, c.opts.MaxResponseBytes)}, 0
	}
	data := buf.Bytes()
	st := hresp.StatusCode
	switch {
	case st >= 200 && st < 300:
		if err := decode(data, hresp.Header); err != nil {
			return &inference.Error{Class: inference.ClassBadResponse, Status: st, Msg: fmt.Sprintf("%s: %v", where, err)}, 0
		}
		return nil, 0
	case st == http.StatusTooManyRequests:
		return &inference.Error{Class: inference.ClassRateLimited, Status: st, Msg: fmt.Sprintf("%s: %s", ep.name, serverMessage(data))}, c.retryAfter(hresp.Header.Get("Retry-After"))
	case st >= 500:
		return &inference.Error{Class: inference.ClassServer, Status: st, Msg: fmt.Sprintf("%s: %s", ep.name, serverMessage(data))}, c.retryAfter(hresp.Header.Get("Retry-After"))
	case st == http.StatusRequestTimeout:
		return &inference.Error{Class: inference.ClassTimeout, Status: st, Msg: fmt.Sprintf("%s: %s", ep.name, serverMessage(data))}, c.retryAfter(hresp.Header.Get("Retry-After"))
	case st >= 300 && st < 400:
		return &inference.Error{Class: inference.ClassHTTP, Status: st, Msg: redirectMessage(where, st, hresp.Header.Get("Location"))}, 0
	case (st == http.StatusBadRequest || st == http.StatusRequestEntityTooLarge || st == http.StatusUnprocessableEntity) && isContextLength(data):
		return &inference.Error{Class: inference.ClassContextLength, Status: st, Msg: fmt.Sprintf("%s: %s", ep.name, serverMessage(data))}, 0
	default:
		return &inference.Error{Class: inference.ClassHTTP, Status: st, Msg: fmt.Sprintf("%s: %s", where, serverMessage(data))}, 0
	}
}

// transportError classifies an error of Do or of reading the body.
func (c *HTTPClient) transportError(ctx context.Context, ep *endpoint, err error) *inference.Error {
	msg := fmt.Sprintf("%s: %v", ep.name, stripURL(err))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return &inference.Error{Class: inference.ClassTimeout, Msg: fmt.Sprintf("%s: no answer within generate.timeout (%s)", ep.name, c.cfg.Timeout.D())}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &inference.Error{Class: inference.ClassTimeout, Msg: msg}
	}
	// Refused, reset, EOF, DNS and every other transport failure.
	return &inference.Error{Class: inference.ClassConnection, Msg: msg}
}

// stripURL drops the *url.Error wrapper (the endpoint is already named).
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// retryAfter parses a Retry-After header: seconds (fractions accepted) or an
// HTTP date, capped at MaxRetryAfter; 0 when absent or unparseable.
func (c *HTTPClient) retryAfter(h string) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(h, 64); err == nil {
		if secs <= 0 || secs != secs {
			return 0
		}
		if secs > c.opts.MaxRetryAfter.Seconds() {
			return c.opts.MaxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(c.opts.Now())
	} else {
		return 0
	}
	if d <= 0 {
		return 0
	}
	if d > c.opts.MaxRetryAfter {
		d = c.opts.MaxRetryAfter
	}
	return d
}

// probeLoop puts endpoints that are out back in when they answer.
func (c *HTTPClient) probeLoop(ctx context.Context) {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, e := range c.fleet.unhealthy() {
			if ctx.Err() != nil {
				return
			}
			if c.probe(ctx, e) {
				c.fleet.markHealthy(e, "probe answered")
			}
		}
	}
}

// probe reports whether e answers GET {base}/models or GET {root}/health
// with a 2xx.
func (c *HTTPClient) probe(ctx context.Context, e *endpoint) bool {
	for _, u := range []string{e.base + "/models", e.root + "/health"} {
		if c.get(ctx, u) {
			return true
		}
	}
	return false
}

func (c *HTTPClient) get(ctx context.Context, u string) bool {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // best effort: a response body, read
	_ = resp.Body.Close()                                        // best effort: a response body, read
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Abort asks every endpoint to abort the requests in flight, with
// SGLang's POST /abort_request {"abort_all": true} (the simulator has it
// too): each aborted request answers with the tokens it generated so far
// and finish_reason "abort". Under generate.api: sglang it aborts this
// client's requests alone, by rid (abortRIDs). Endpoints are asked at once; the error names
// each that did not answer with a 2xx (vLLM has no such call: its
// requests must be cancelled by the client).
func (c *HTTPClient) Abort(ctx context.Context) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	if c.cfg.API == inference.APISGLang {
		return c.abortRIDs(ctx)
	}
	c.fleet.mu.Lock()
	eps := slices.Clone(c.fleet.eps)
	c.fleet.mu.Unlock()
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.abortOne(ctx, e)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

var _ inference.Aborter = (*HTTPClient)(nil)

func (c *HTTPClient) abortOne(ctx context.Context, e *endpoint) error {
	return c.postAbort(ctx, e, `{"abort_all": true}`)
}

// postAbort sends body to e's POST /abort_request.
func (c *HTTPClient) postAbort(ctx context.Context, e *endpoint, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.root+"/abort_request", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: POST /abort_request: %w", e.name, stripURL(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // best effort: drained for the connection's reuse
	_ = resp.Body.Close()                                        // best effort: a response body, read
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: POST /abort_request: HTTP %d", e.name, resp.StatusCode)
	}
	return nil
}
