package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// HTTPClient is the client over a fleet of endpoints: the transport that
// carries generate.api's protocol (Protocol). It is safe for concurrent
// use.
type HTTPClient struct {
	cfg     inference.Config
	opts    HTTPOptions
	client  *http.Client
	owned   *http.Transport // closed by Close when the client built it
	fleet   *fleet
	sem     chan struct{}
	proto   Protocol // generate.api's
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
	// ids are the requests in flight that their protocol named (Call.ID:
	// SGLang's rids), for Abort.
	ids idSet
	// noPriority is set once a server refused a request's priority
	// (generate.priority: auto): no request carries one after that.
	noPriority atomic.Bool
}

var (
	_ inference.Client         = (*HTTPClient)(nil)
	_ inference.ContextLimiter = (*HTTPClient)(nil)
)

// errDeadline is the cause of a request's overall deadline (generate.deadline).
var errDeadline = errors.New("generate.deadline exceeded")

// NewHTTP builds a client for cfg's endpoints and starts its health prober.
// Errors name the generate.* key at fault.
func NewHTTP(cfg inference.Config, opts HTTPOptions) (*HTTPClient, error) {
	eps, proto, errs := checkConfig(cfg)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	opts.setDefaults()
	c := &HTTPClient{
		cfg:   cfg,
		opts:  opts,
		sem:   make(chan struct{}, cfg.Concurrency),
		proto: proto,
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
	healthLog := opts.Logf
	if opts.HealthLogf != nil {
		healthLog = opts.HealthLogf
	}
	c.fleet = newFleet(eps, cfg.EndpointConcurrency, opts.AffinitySlack, opts.EjectAfter, opts.Now, healthLog)
	if opts.BreakAfter > 0 {
		c.brk = newBreaker(opts.BreakAfter, len(eps), opts.OnBreak)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.fleet.sil.floor = opts.SilenceAfter
	c.wg.Add(2)
	go c.probeLoop(ctx)
	go c.silenceLoop(ctx, max(min(opts.SilenceAfter/4, canaryTick), 10*time.Millisecond))
	return c, nil
}

// checkConfig returns cfg's endpoints and protocol, or every problem of
// the generate.* keys the client reads, each naming its key.
func checkConfig(cfg inference.Config) ([]*endpoint, Protocol, []error) {
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
	proto, err := protocolOf(cfg.API)
	if err != nil {
		bad("generate.api", "%v", err)
	}
	if cfg.Model == "" {
		bad("generate.model", "required")
	}
	for _, c := range []struct {
		ok       bool
		key, msg string
	}{
		{cfg.Concurrency >= 1, "generate.concurrency", fmt.Sprintf("must be >= 1, got %d", cfg.Concurrency)},
		{cfg.EndpointConcurrency >= 0, "generate.endpoint_concurrency", fmt.Sprintf("must be >= 0, got %d", cfg.EndpointConcurrency)},
		{cfg.MaxAttempts >= 1, "generate.max_attempts", fmt.Sprintf("must be >= 1, got %d", cfg.MaxAttempts)},
		{cfg.Timeout >= 0, "generate.timeout", fmt.Sprintf("must be >= 0, got %s", cfg.Timeout.D())},
		{cfg.Deadline >= 0, "generate.deadline", fmt.Sprintf("must be >= 0, got %s", cfg.Deadline.D())},
		{cfg.BackoffBase >= 0, "generate.backoff_base", fmt.Sprintf("must be >= 0, got %s", cfg.BackoffBase.D())},
		{cfg.BackoffMax >= cfg.BackoffBase, "generate.backoff_max", fmt.Sprintf("must be >= generate.backoff_base (%s), got %s", cfg.BackoffBase.D(), cfg.BackoffMax.D())},
	} {
		if !c.ok {
			bad(c.key, "%s", c.msg)
		}
	}
	if s, ok := cfg.Params["stream"].(bool); ok && s {
		bad("generate.params.stream", "streaming is not supported (trajflow reads whole responses); remove the key")
	}
	return eps, proto, errs
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

// Complete sends req to an endpoint of the fleet, retrying as configured:
// as generate.api's protocol sends it, or req.API's when set. A failure
// is an *Error with its class, or the context's error when ctx ends
// first.
func (c *HTTPClient) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	if req == nil {
		return nil, errors.New("llm: nil request")
	}
	if err := c.brk.open(); err != nil {
		return nil, brokenError(err)
	}
	req = c.withDefaults(req)
	call, err := c.protocolFor(req).Call(req)
	if err != nil {
		return nil, err
	}
	resp, ep, err := c.send(ctx, req.Affinity, call)
	if err != nil && req.Priority != nil && !call.PriorityFinal && priorityRefused(err) {
		return c.withoutPriority(ctx, req, err)
	}
	if err != nil {
		var e *inference.Error
		if errors.As(err, &e) {
			call.hint(e)
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

// withDefaults is req with the config's model when it names none, and
// without its priority when none is sent (generate.priority: off, or a
// server refused one).
func (c *HTTPClient) withDefaults(req *inference.Request) *inference.Request {
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
	return req
}

// protocolFor is the protocol req goes by: generate.api's, or req.API's
// when set (an OpenAI Batch line's url).
func (c *HTTPClient) protocolFor(req *inference.Request) Protocol {
	if req.API != "" {
		if p, err := protocolOf(req.API); err == nil {
			return p
		}
	}
	return c.proto
}

// withoutPriority sends req again without its priority, which a server
// without priority scheduling refused (err): vLLM's default FCFS policy
// refuses a priority other than 0, a hosted API an unknown argument. No
// request carries one from then on.
func (c *HTTPClient) withoutPriority(ctx context.Context, req *inference.Request, err error) (*inference.Response, error) {
	if !c.noPriority.Swap(true) && c.opts.Logf != nil {
		c.opts.Logf("generate: the server refused the request priority (%v); requests go without it (generate.priority: off silences this)", err)
	}
	r := *req
	r.Priority = nil
	return c.Complete(ctx, &r)
}

// send carries call to an endpoint of the fleet (do) and returns its
// decoded answer and the endpoint's name.
func (c *HTTPClient) send(ctx context.Context, affinity string, call *Call) (*inference.Response, string, error) {
	if call.ID != "" {
		defer c.ids.done(call.ID)
	}
	url := func(ep *endpoint) string {
		if call.ID != "" {
			c.ids.sent(call.ID, ep)
		}
		if call.Root {
			return ep.root + call.Path
		}
		return ep.base + call.Path
	}
	var resp *inference.Response
	ep, err := c.do(ctx, affinity, url, call.Body, func(data []byte, h http.Header) error {
		var err error
		resp, err = call.Decode(data)
		if err == nil && c.opts.KeepBody {
			resp.Raw = bytes.Clone(data)
			resp.RequestID = call.ID
			if resp.RequestID == "" {
				resp.RequestID = h.Get("X-Request-Id")
			}
		}
		return err
	})
	return resp, ep, err
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
		ep, err := c.acquire(ctx, affinity, tried, attempt)
		if err != nil {
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
			c.fleet.release(ep, &inference.Error{Class: inference.ClassCancelled}, 0, took)
			<-c.sem
			observe(false)
			return "", c.ctxErr(ctx, last, attempt)
		}
		c.fleet.release(ep, aerr, retryAfter, took)
		<-c.sem
		broken := c.brk.record(ep.idx, aerr)
		if aerr == nil {
			observe(false)
			return ep.name, nil
		}
		tried[ep.idx] = true
		last = aerr
		wait, err := c.retryWait(ctx, ep, aerr, broken, attempt, retryAfter)
		if err != nil {
			observe(false)
			return "", err
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

// acquire takes a slot of generate.concurrency and an endpoint for an
// attempt (a retry prefers one not tried yet).
func (c *HTTPClient) acquire(ctx context.Context, affinity string, tried []bool, attempt int) (*endpoint, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ep, err := c.fleet.acquire(ctx, affinity, tried, attempt > 1)
	if err != nil {
		<-c.sem
		return nil, err
	}
	return ep, nil
}

// attempt sends body to u on ep once and decodes a 2xx body. It returns
// the attempt's classified error and the server's Retry-After (0 when
// none), or nil.
func (c *HTTPClient) attempt(ctx context.Context, ep *endpoint, u string, body []byte, decode func([]byte, http.Header) error) (aerr *inference.Error, retryAfter time.Duration) {
	if t := c.cfg.Timeout.D(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	// Moved to another endpoint when this one goes silent.
	ctx, move := context.WithCancelCause(ctx)
	defer move(nil)
	id := c.fleet.track(ep, move)
	defer c.fleet.untrack(ep, id)
	defer func() {
		if aerr != nil && errors.Is(context.Cause(ctx), errSilent) {
			aerr = &inference.Error{Class: inference.ClassConnection, Msg: fmt.Sprintf("%s: %v: the request goes to another endpoint", ep.name, errSilent)}
		}
	}()
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
	release, aerr := c.readBody(ctx, ep, hresp, buf)
	defer release()
	if aerr != nil {
		return aerr, 0
	}
	// where names the URL requested, as errors show it: the endpoint's
	// name and the path under the base URL, or, for a path under the
	// server's root (/tokenize, /generate), the root's.
	where := ep.name + strings.TrimPrefix(u, ep.base)
	if !strings.HasPrefix(u, ep.base) {
		where = pipeline.RedactURL(u)
	}
	return c.classify(ep, where, hresp, buf.Bytes(), decode)
}

// readBody reads hresp's body into buf, within MaxResponseBytes; a large
// body waits its turn, so that the bodies held at once while read and
// decoded stay within LargeBodyBytes, whatever the concurrency. release
// gives its room back once the body is decoded.
func (c *HTTPClient) readBody(ctx context.Context, ep *endpoint, hresp *http.Response, buf *bytes.Buffer) (release func(), aerr *inference.Error) {
	release = func() {}
	if hresp.ContentLength > c.opts.MaxResponseBytes {
		// Refused before a byte of it is read.
		return release, &inference.Error{Class: inference.ClassBadResponse, Status: hresp.StatusCode, Msg: fmt.Sprintf("%s: response body of %d bytes, over %d", ep.name, hresp.ContentLength, c.opts.MaxResponseBytes)}
	}
	var err error
	if hresp.ContentLength > maxPooledBuffer {
		if release, err = c.large.acquire(ctx, hresp.ContentLength); err != nil {
			return release, c.transportError(ctx, ep, err)
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
		return release, c.transportError(ctx, ep, err)
	}
	if int64(buf.Len()) > c.opts.MaxResponseBytes {
		return release, &inference.Error{Class: inference.ClassBadResponse, Status: hresp.StatusCode, Msg: fmt.Sprintf("%s: response body over %d bytes", ep.name, c.opts.MaxResponseBytes)}
	}
	return release, nil
}
