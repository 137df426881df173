package httpenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/wire"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registry name.
const Name = "http"

// Protocols.
const (
	ProtocolResetStep = "reset_step"
	ProtocolNeMoGym   = "nemo_gym"
)

// Defaults.
const (
	DefaultRequestTimeout = 60 * time.Second
	DefaultMaxAttempts    = 3
	DefaultBackoff        = 250 * time.Millisecond
	maxBody               = 64 << 20
)

func init() {
	envs.RegisterSpec(Name, envs.Spec{
		New: func(opts envs.Options) (envs.Env, error) {
			var c Config
			if err := opts.Decode(&c); err != nil {
				return nil, err
			}
			c.Section = opts.Section
			return New(c)
		},
		// Time limits and retries change how reliably, not what.
		Operational: []string{"request_timeout", "max_attempts", "backoff"},
		// Header values carry bearer tokens and API keys.
		Secret: []string{"headers"},
	})
}

// Config is the environment's options (the env section's own keys).
type Config struct {
	// URL is the server's base URL (required), e.g. http://127.0.0.1:8000.
	URL string `yaml:"url"`
	// Protocol is reset_step (trajflow's /reset and /step) or nemo_gym (a
	// NeMo Gym resources server); see docs/external-envs.md.
	//
	// Default: `reset_step`.
	Protocol string `yaml:"protocol"`
	// RequestTimeout bounds one HTTP attempt. (env.timeout is taken: it
	// bounds a whole trajectory.)
	//
	// Default: `1m`.
	RequestTimeout pipeline.Duration `yaml:"request_timeout"`
	// MaxAttempts bounds the tries per request (1: no retry).
	//
	// Default: `3`.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the first retry's base delay, doubled each retry.
	//
	// Default: `250ms`.
	Backoff pipeline.Duration `yaml:"backoff"`
	// Headers are sent with every request (e.g. Authorization).
	Headers map[string]string `yaml:"headers"`

	// Section names the config section in errors (default "env").
	Section string `yaml:"-"`
	// Client, when set, replaces the default HTTP client.
	Client *http.Client `yaml:"-"`
}

// Env is an HTTP environment client. It implements envs.Env.
type Env struct {
	cfg    Config
	base   string
	client *http.Client
	// verified are the run's verify answers (nemo_gym), for Finish.
	verified verified
}

var (
	_ envs.Env      = (*Env)(nil)
	_ envs.Ender    = (*Env)(nil)
	_ envs.Finisher = (*Env)(nil)
)

// New validates c and returns the environment. It does not contact the server.
func New(c Config) (*Env, error) {
	if c.Section == "" {
		c.Section = "env"
	}
	var errs []error
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		errs = append(errs, fmt.Errorf("%s.url: required (e.g. http://127.0.0.1:8000)", c.Section))
	case err != nil:
		errs = append(errs, fmt.Errorf("%s.url: %v", c.Section, err))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		errs = append(errs, fmt.Errorf("%s.url: %q is not an http(s) URL", c.Section, c.URL))
	}
	switch c.Protocol {
	case "":
		c.Protocol = ProtocolResetStep
	case ProtocolResetStep, ProtocolNeMoGym:
	default:
		errs = append(errs, fmt.Errorf("%s.protocol: %q is not reset_step or nemo_gym", c.Section, c.Protocol))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("%s.request_timeout: must be positive", c.Section))
	} else if c.RequestTimeout == 0 {
		c.RequestTimeout = pipeline.Duration(DefaultRequestTimeout)
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("%s.max_attempts: must be at least 1, got %d", c.Section, c.MaxAttempts))
	} else if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.Backoff < 0 {
		errs = append(errs, fmt.Errorf("%s.backoff: must not be negative", c.Section))
	} else if c.Backoff == 0 {
		c.Backoff = pipeline.Duration(DefaultBackoff)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	client := c.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		client = &http.Client{Transport: tr}
	}
	return &Env{cfg: c, base: strings.TrimRight(c.URL, "/"), client: client}, nil
}

// Reset implements envs.Env.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	if e.cfg.Protocol == ProtocolNeMoGym {
		return e.nemoReset(ctx, r)
	}
	req, err := wire.NewReset(r)
	if err != nil {
		return nil, fmt.Errorf("http env: reset: %w", err)
	}
	resp, err := e.postResult(ctx, "/reset", req)
	if err != nil {
		return nil, err
	}
	return resp.Reset(), nil
}

// Step implements envs.Env.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	if e.cfg.Protocol == ProtocolNeMoGym {
		return e.nemoStep(ctx, r, action)
	}
	req, err := wire.NewStep(r, action)
	if err != nil {
		return nil, fmt.Errorf("http env: step: %w", err)
	}
	resp, err := e.postResult(ctx, "/step", req)
	if err != nil {
		return nil, err
	}
	return resp.Step(r.State), nil
}

// postResult posts body to path and decodes a reset/step response.
func (e *Env) postResult(ctx context.Context, path string, body any) (*wire.Response, error) {
	res, err := e.post(ctx, path, body, nil)
	if err != nil {
		return nil, err
	}
	if res.status/100 != 2 {
		return nil, fmt.Errorf("http env: POST %s: HTTP %d: %s", res.url, res.status, snippet(res.body))
	}
	resp, err := wire.Decode(res.body)
	if err != nil {
		return nil, fmt.Errorf("http env: POST %s: bad response %s: %w", res.url, snippet(res.body), err)
	}
	if err := resp.Err(); err != nil {
		return nil, fmt.Errorf("http env: POST %s: %w", res.url, err)
	}
	return resp, nil
}

// result is a finished HTTP exchange.
type result struct {
	url     string
	status  int
	body    []byte
	cookies []*http.Cookie
}

// errTimeout is an attempt that got no answer within request_timeout.
var errTimeout = errors.New("no answer within request_timeout")

// post sends body (JSON, or raw bytes when it is json.RawMessage) to path,
// retrying connection errors, timeouts, 429 and 5xx. Other statuses are
// returned for the caller to judge.
func (e *Env) post(ctx context.Context, path string, body any, cookies map[string]string) (*result, error) {
	return e.send(ctx, path, body, cookies, true)
}

// postGym is post as NeMo Gym's server client does it (server_utils.py,
// request): only connection errors are retried; every answer, whatever
// its status, and a timeout (the server may have acted) go to the caller.
func (e *Env) postGym(ctx context.Context, path string, body any, cookies map[string]string) (*result, error) {
	return e.send(ctx, path, body, cookies, false)
}

func (e *Env) send(ctx context.Context, path string, body any, cookies map[string]string, retryStatus bool) (*result, error) {
	u := e.base + path
	var payload []byte
	if raw, ok := body.(json.RawMessage); ok {
		payload = raw
	} else {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("http env: POST %s: encoding request: %w", u, err)
		}
		payload = b
	}
	var last error
	for attempt := 1; ; attempt++ {
		res, err := e.once(ctx, u, payload, cookies)
		switch {
		case err == nil && (!retryStatus || res.status != http.StatusTooManyRequests && res.status < 500):
			return res, nil
		case err == nil:
			last = fmt.Errorf("HTTP %d: %s", res.status, snippet(res.body))
		case ctx.Err() != nil:
			return nil, fmt.Errorf("http env: POST %s: %w", u, ctx.Err())
		case !retryStatus && errors.Is(err, errTimeout):
			return nil, fmt.Errorf("http env: POST %s: %v", u, err)
		default:
			last = err
		}
		if attempt >= e.cfg.MaxAttempts {
			return nil, fmt.Errorf("http env: POST %s: %v (after %d attempts)", u, last, attempt)
		}
		d := e.cfg.Backoff.D() << (attempt - 1)
		d = d/2 + rand.N(d/2+1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("http env: POST %s: %w (after %d attempts; last: %v)", u, ctx.Err(), attempt, last)
		}
	}
}

func (e *Env) once(ctx context.Context, u string, payload []byte, cookies map[string]string) (*result, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	names := make([]string, 0, len(cookies))
	for n := range cookies {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		req.AddCookie(&http.Cookie{Name: n, Value: cookies[n]})
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, fmt.Errorf("%w %s", errTimeout, e.cfg.RequestTimeout.D())
		}
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxBody)
	}
	return &result{url: u, status: resp.StatusCode, body: b, cookies: resp.Cookies()}, nil
}

func snippet(b []byte) string {
	const n = 200
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return fmt.Sprintf("%q...", s[:n])
	}
	return fmt.Sprintf("%q", s)
}
