// Package client is the Go client of trajflow serve's HTTP API
// (docs/serve.md): it takes training steps (Next), acknowledges them
// (Ack), and brackets a weight update (Pause, SetPolicy, Resume). It also
// holds the API's wire types, which the service shares.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// The response headers of a step, for every format.
const (
	HeaderStep     = "Trajflow-Step"            // the step's number
	HeaderVersions = "Trajflow-Policy-Versions" // its tokens' policy versions, ascending, comma-separated
	HeaderGroups   = "Trajflow-Groups"          // its groups
	HeaderRows     = "Trajflow-Rows"            // its rows (trajectories)
)

// The formats of a step's body.
const (
	FormatArrow   = "arrow"   // an Arrow IPC stream (the default)
	FormatParquet = "parquet" // one Parquet file
	FormatJSONL   = "jsonl"   // one JSON object per row
)

// Status is what GET /v1/status answers: the service's queue, steps,
// leases and policy, and the run's progress.
type Status struct {
	// PolicyVersion is the fleet's policy version; Paused and PauseMode
	// its pause.
	PolicyVersion int64  `json:"policy_version"`
	Paused        bool   `json:"paused"`
	PauseMode     string `json:"pause_mode,omitempty"`
	// QueuedGroups are the kept groups committed and in no step yet;
	// Waiting the step sizes the trainers waiting now ask for.
	QueuedGroups int   `json:"queued_groups"`
	Waiting      []int `json:"waiting"`
	// Demand is the kept groups the run is asked for in all.
	Demand int `json:"demand"`
	// Steps counts the steps made, acknowledged, leased now and waiting
	// to be served again; Leases are the leases held.
	Steps  StepCounts `json:"steps"`
	Leases []Lease    `json:"leases"`
	// Served, Reserved, Expired and Acked count since the service
	// started: steps made and served, served again, leases run out, acks.
	Served   int64 `json:"served_total"`
	Reserved int64 `json:"reserved_total"`
	Expired  int64 `json:"lease_expired_total"`
	Acked    int64 `json:"acked_total"`
	// Staleness counts the queued groups by how many policy versions
	// their oldest token is behind the current one ("0", "1", ...).
	Staleness map[string]int `json:"staleness"`
	// InGeneration and InEnvironment are the model and environment calls
	// in flight; GroupsKept and GroupsFinished the run's groups since it
	// started, KeepRate their ratio; TokensGenerated the model's tokens.
	InGeneration    int     `json:"in_generation"`
	InEnvironment   int     `json:"in_environment"`
	GroupsKept      int     `json:"groups_kept"`
	GroupsFinished  int     `json:"groups_finished"`
	KeepRate        float64 `json:"keep_rate"`
	TokensGenerated int64   `json:"tokens_generated"`
	// Ended is set once no more groups come (the input ran out): why.
	Ended string `json:"ended,omitempty"`
}

// StepCounts count the steps by state.
type StepCounts struct {
	Made    int `json:"made"`
	Acked   int `json:"acked"`
	Leased  int `json:"leased"`
	Pending int `json:"pending"`
}

// Lease is one leased step and when its lease runs out.
type Lease struct {
	Step    int64     `json:"step"`
	Expires time.Time `json:"expires"`
}

// Error is an error answer of the service: its HTTP status, its message
// and the request parameter it names, if any.
type Error struct {
	Status    int    `json:"-"`
	Message   string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func (e *Error) Error() string {
	if e.Parameter != "" {
		return fmt.Sprintf("trajflow serve: %d: %s: %s", e.Status, e.Parameter, e.Message)
	}
	return fmt.Sprintf("trajflow serve: %d: %s", e.Status, e.Message)
}

// Client talks to one trajflow serve.
type Client struct {
	base  string
	token string
	// HTTP is the HTTP client; its timeout must leave room for a step to
	// fill (Next blocks until it has), so the default has none: bound a
	// call with its context.
	HTTP *http.Client
	// Alloc is the allocator of the Arrow records of Next; default Go's.
	Alloc memory.Allocator
}

// New returns a client of the service at baseURL (http://host:port),
// sending token as a bearer token when it is not empty.
func New(baseURL, token string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, HTTP: &http.Client{}}
}

// Step is one training step as served.
type Step struct {
	// Number is the step's number: acknowledge it with Ack.
	Number int64
	// Versions are the policy versions of its tokens, ascending.
	Versions []int64
	// Groups and Rows count its groups and rows.
	Groups, Rows int
	// Format is the body's format.
	Format string
	// Records are the step's rows as Arrow records (format arrow); the
	// caller releases them with Release.
	Records []arrow.Record
	// Body is the raw body (formats parquet and jsonl).
	Body []byte
}

// Release releases the step's records.
func (s *Step) Release() {
	for _, r := range s.Records {
		r.Release()
	}
	s.Records = nil
}

// Next takes the next step of k kept groups, waiting until the service
// has them; format is arrow (""), parquet or jsonl. The step is leased to
// this caller: acknowledge it with Ack once trained on, or it is served
// again when serve.lease runs out.
func (c *Client) Next(ctx context.Context, k int, format string) (*Step, error) {
	if format == "" {
		format = FormatArrow
	}
	q := url.Values{"groups": {strconv.Itoa(k)}, "format": {format}}
	resp, err := c.do(ctx, http.MethodGet, "/v1/steps/next?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	st := &Step{Format: format}
	h := resp.Header
	if st.Number, err = strconv.ParseInt(h.Get(HeaderStep), 10, 64); err != nil {
		return nil, fmt.Errorf("trajflow serve: bad %s header %q", HeaderStep, h.Get(HeaderStep))
	}
	st.Groups, _ = strconv.Atoi(h.Get(HeaderGroups))
	st.Rows, _ = strconv.Atoi(h.Get(HeaderRows))
	if v := h.Get(HeaderVersions); v != "" {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("trajflow serve: bad %s header %q", HeaderVersions, v)
			}
			st.Versions = append(st.Versions, n)
		}
	}
	if format != FormatArrow {
		st.Body, err = io.ReadAll(resp.Body)
		return st, err
	}
	alloc := c.Alloc
	if alloc == nil {
		alloc = memory.NewGoAllocator()
	}
	rd, err := ipc.NewReader(resp.Body, ipc.WithAllocator(alloc))
	if err != nil {
		return nil, fmt.Errorf("trajflow serve: step %d: %w", st.Number, err)
	}
	defer rd.Release()
	for rd.Next() {
		rec := rd.Record()
		rec.Retain()
		st.Records = append(st.Records, rec)
	}
	if err := rd.Err(); err != nil {
		st.Release()
		return nil, fmt.Errorf("trajflow serve: step %d: %w", st.Number, err)
	}
	return st, nil
}

// Ack acknowledges step n: it is done and never served again. Acking a
// step twice is harmless.
func (c *Client) Ack(ctx context.Context, n int64) error {
	return c.call(ctx, http.MethodPost, fmt.Sprintf("/v1/steps/%d/ack", n), nil, nil)
}

// SetPolicy tells the service that weights of version v are live on the
// fleet; versions only grow.
func (c *Client) SetPolicy(ctx context.Context, v int64) error {
	return c.call(ctx, http.MethodPost, "/v1/policy", map[string]int64{"version": v}, nil)
}

// Pause stops new generation until Resume, for a weight update; mode is
// abort or keep ("" takes serve.pause_mode).
func (c *Client) Pause(ctx context.Context, mode string) error {
	var body any
	if mode != "" {
		body = map[string]string{"mode": mode}
	}
	return c.call(ctx, http.MethodPost, "/v1/pause", body, nil)
}

// Resume ends a pause.
func (c *Client) Resume(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/resume", nil, nil)
}

// Status returns the service's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.call(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, method, path, rd)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// do sends a request and turns an error answer into an *Error.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
		e := &Error{Status: resp.StatusCode}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(b))
		}
		return nil, e
	}
	return resp, nil
}
