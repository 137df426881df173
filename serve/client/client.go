// Package client is the Go client of trajflow serve's HTTP API
// (docs/serve.md): it takes training steps (Next), acknowledges them
// (Ack), and brackets a weight update (Pause, SetPolicy, Resume). It also
// holds the API's wire types, which the service shares.
package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
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
	// A rank's slice of a step (rank and world asked): the rank, the
	// world, and the groups of the whole step (Groups and Rows count
	// the slice's).
	HeaderRank       = "Trajflow-Rank"
	HeaderWorld      = "Trajflow-World"
	HeaderStepGroups = "Trajflow-Step-Groups"
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
	// its pause, PausedSince and PausedBy when it was recorded and who
	// asked for it (its by, else its address).
	PolicyVersion int64     `json:"policy_version"`
	Paused        bool      `json:"paused"`
	PauseMode     string    `json:"pause_mode,omitempty"`
	PausedSince   time.Time `json:"paused_since,omitzero"`
	PausedBy      string    `json:"paused_by,omitempty"`
	// PauseExpires is when the service ends the pause itself, no resume
	// having come (serve.pause_timeout, 30 minutes by default); zero when
	// not paused or with pause_timeout 0.
	PauseExpires time.Time `json:"pause_expires,omitzero"`
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
	// LastAckedStep is the highest step number acknowledged (0: none);
	// NextStep the number the next new step gets. A trainer started
	// afresh or from a checkpoint reads them, and PolicyVersion, first.
	LastAckedStep int64 `json:"last_acked_step"`
	NextStep      int64 `json:"next_step"`
	// Served, Reserved, Expired and Acked count since the service
	// started: steps made and served, served again, leases run out, acks.
	Served   int64 `json:"served_total"`
	Reserved int64 `json:"reserved_total"`
	Expired  int64 `json:"lease_expired_total"`
	Acked    int64 `json:"acked_total"`
	// Staleness counts the queued groups by how many policy versions
	// their oldest token is behind the current one ("0", "1", ...).
	Staleness map[string]int `json:"staleness"`
	// StaleGroups are the kept groups never served because they were
	// more than serve.max_staleness versions behind the policy when a
	// step was made (serve.on_stale requeue or drop), since the first
	// start.
	StaleGroups int `json:"stale_groups"`
	// RequeuedGroups are the stale groups whose tasks were handed back
	// to the run to be sampled again in a new attempt (serve.on_stale
	// requeue) since the service started.
	RequeuedGroups int `json:"requeued_groups"`
	// StaleShare is the share of the latest kept groups decided (handed
	// out in a step or set aside as stale; a window of four steps'
	// worth, at least 32) that were set aside as stale. StaleAlarm is set
	// while the window is full and more than half of it was set aside:
	// the fleet generates while little reaches the trainer.
	StaleShare float64     `json:"stale_share"`
	StaleAlarm *StaleAlarm `json:"stale_alarm,omitempty"`
	// Drift is the drift between the trainers' logprobs and the
	// engine's, from the acks that sent logprobs; nil before the first.
	Drift *DriftStatus `json:"drift,omitempty"`
	// Eval is serve.eval's evaluations; nil without serve.eval.
	Eval *EvalStatus `json:"eval,omitempty"`
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

// Drift compares a trainer's logprobs of generated tokens with the
// engine's (an ack's logprobs), over Tokens tokens of Sequences rows, d
// being log π_trainer − log π_engine of a token: MeanAbs and MaxAbs of
// |d|; K3 the mean of e^d − 1 − d, the k3 estimate of KL(engine ‖
// trainer); Outside the share of tokens whose ratio e^d lies outside
// [1/c, c] (serve.drift_ratio); per row, the sequence-level ratio
// exp(mean d), its smallest and largest (SeqRatioMin, SeqRatioMax) and
// the standard deviation of its log (SeqLogRatioStd).
type Drift struct {
	Tokens         int64   `json:"tokens"`
	Sequences      int64   `json:"sequences"`
	MeanAbs        float64 `json:"mean_abs"`
	MaxAbs         float64 `json:"max_abs"`
	K3             float64 `json:"k3"`
	Outside        float64 `json:"outside_share"`
	SeqRatioMin    float64 `json:"seq_ratio_min"`
	SeqRatioMax    float64 `json:"seq_ratio_max"`
	SeqLogRatioStd float64 `json:"seq_log_ratio_std"`
}

// StepDrift is one step's drift: over all its tokens and by lag, the
// number of policy versions a token is behind the trainer's version
// when it acknowledged (a row's sequence ratio counted at its oldest
// token's lag).
type StepDrift struct {
	Step           int64            `json:"step"`
	TrainerVersion int64            `json:"trainer_version"`
	RatioBound     float64          `json:"ratio_bound"`
	All            Drift            `json:"all"`
	ByLag          map[string]Drift `json:"by_lag"`
}

// DriftStatus is the drift of the steps acknowledged with logprobs:
// how many, the latest, and all of them together by lag.
type DriftStatus struct {
	Steps int              `json:"steps"`
	Last  StepDrift        `json:"last"`
	ByLag map[string]Drift `json:"by_lag"`
}

// EvalResult is one evaluation (serve.eval) at policy Version: every
// request of it carried that version. PassAt1 and PassAtK (K: the
// largest k up to the samples a task) are over Tasks tasks, MeanReward
// over its Rows rows; Dir is its output directory.
type EvalResult struct {
	Version    int64   `json:"version"`
	Tasks      int64   `json:"tasks"`
	Rows       int64   `json:"rows"`
	PassAt1    float64 `json:"pass_at_1"`
	K          int     `json:"k"`
	PassAtK    float64 `json:"pass_at_k"`
	MeanReward float64 `json:"mean_reward"`
	Seconds    float64 `json:"seconds"`
	Dir        string  `json:"dir"`
}

// EvalStatus is serve.eval's part of the status: every how many versions,
// the version being evaluated now, and the results so far.
type EvalStatus struct {
	Every   int64        `json:"every"`
	Running *int64       `json:"running,omitempty"`
	Results []EvalResult `json:"results"`
}

// StaleAlarm says that most of the latest kept groups were set aside as
// stale (Status.StaleAlarm): SetAside of the last Window, their oldest
// tokens of versions Oldest to Newest, the policy at version Policy,
// under serve.max_staleness MaxStaleness, since Since.
type StaleAlarm struct {
	Since        time.Time `json:"since"`
	SetAside     int       `json:"set_aside"`
	Window       int       `json:"window"`
	Oldest       int64     `json:"oldest_version"`
	Newest       int64     `json:"newest_version"`
	Policy       int64     `json:"policy_version"`
	MaxStaleness int64     `json:"max_staleness"`
}

// Lease is one leased step (Rank's slice, for a step served to the ranks
// of a data-parallel job) and when its lease runs out.
type Lease struct {
	Step    int64     `json:"step"`
	Rank    *int      `json:"rank,omitempty"`
	Expires time.Time `json:"expires"`
}

// HeaderClient is the request header naming the caller (Client.Name):
// the service records it as the by of a pause.
const HeaderClient = "Trajflow-Client"

// The reasons of the error answers that blame no request parameter.
const (
	ReasonEnded    = "ended"    // 503: no more kept groups will come (the input ran out, or the run failed)
	ReasonStopping = "stopping" // 503: the service is stopping; a restart serves again
	ReasonInternal = "internal" // 500: the service failed (the disk, say); see its log
	// ReasonDiskFull: 503, the service could not record the change (its
	// disk is full) and did nothing of it; the answer's Retry-After says
	// when to try again.
	ReasonDiskFull = "disk_full"
	// ReasonIOError: 503, the service could not record the change (its
	// disk reported an I/O error) and did nothing of it; Retry-After says
	// when to try again (the state is written to a new file each time).
	ReasonIOError = "io_error"
	// ReasonNoSuchEndpoint: 404, a path the API does not have.
	ReasonNoSuchEndpoint = "no_such_endpoint"
)

// Error is an error answer of the service: its HTTP status, its message,
// and the request parameter it names or else its reason (Reason*). A 409
// of SetPolicy names the service's current PolicyVersion.
type Error struct {
	Status        int    `json:"-"`
	Message       string `json:"error"`
	Parameter     string `json:"parameter,omitempty"`
	Reason        string `json:"reason,omitempty"`
	PolicyVersion *int64 `json:"policy_version,omitempty"`
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
	// Name names this caller to the service (the Trajflow-Client header,
	// recorded as a pause's by); New sets it to host:pid. A rank of a
	// data-parallel job is a good name.
	Name string
	// Retry is how a call that met a restart of the service is retried.
	Retry Retry
}

// Retry is how a call is retried when the service is down or restarting:
// a connection error (refused, reset, a body cut short), a 502 or 504
// (a proxy before the service), a 503 but one whose reason is
// ReasonEnded. Each wait is drawn at random from [w/2, w] (jitter, so
// that a fleet of trainers does not come back at once), w doubling from
// Initial to Max; retries stop once Deadline has passed since the call's
// first failure (a Next that waited long for its step still gets its
// retries), and the last error is returned. The zero value is the defaults.
// Every call is safe to retry: an ack, a policy version, a pause or a
// resume sent twice is one; a step whose answer was lost is served again
// (after a restart, or when its lease runs out).
type Retry struct {
	// Initial is the first wait; default 200ms.
	Initial time.Duration
	// Max bounds a wait; default 5s.
	Max time.Duration
	// Deadline bounds the retries of one call, from its first failure;
	// default 5m. Negative: no retries.
	Deadline time.Duration
	// OnRetry, when set, hears each error retried and the wait before the
	// next try (a trainer logs it).
	OnRetry func(err error, wait time.Duration)
}

// The defaults of Retry.
const (
	DefaultRetryInitial  = 200 * time.Millisecond
	DefaultRetryMax      = 5 * time.Second
	DefaultRetryDeadline = 5 * time.Minute
)

func (r Retry) withDefaults() Retry {
	if r.Initial <= 0 {
		r.Initial = DefaultRetryInitial
	}
	if r.Max <= 0 {
		r.Max = DefaultRetryMax
	}
	if r.Deadline == 0 {
		r.Deadline = DefaultRetryDeadline
	}
	return r
}

// Retryable reports whether an error of a call is one Retry retries: a
// connection error, or an *Error of status 502, 504, or 503 but
// ReasonEnded.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		switch e.Status {
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			return true
		case http.StatusServiceUnavailable:
			return e.Reason != ReasonEnded
		}
		return false
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, errCut) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errCut marks a step's body that ended before its end: the connection
// broke (a restart of the service, say).
var errCut = errors.New("the answer was cut short")

// retry runs try until it succeeds, fails with an error Retryable does
// not retry, ctx ends, or c.Retry.Deadline has passed since the first
// failure.
func (c *Client) retry(ctx context.Context, try func() error) error {
	r := c.Retry.withDefaults()
	var start time.Time
	wait := r.Initial
	for {
		err := try()
		if err == nil || r.Deadline < 0 || !Retryable(err) || ctx.Err() != nil {
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		d := wait/2 + rand.N(wait/2+1)
		if time.Since(start)+d > r.Deadline {
			return fmt.Errorf("%w (retried for %s, Retry.Deadline)", err, time.Since(start).Round(time.Millisecond))
		}
		if r.OnRetry != nil {
			r.OnRetry(err, d)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, r.Max)
	}
}

// New returns a client of the service at baseURL (http://host:port),
// sending token as a bearer token when it is not empty, named host:pid,
// retrying with the defaults of Retry.
func New(baseURL, token string) *Client {
	host, _ := os.Hostname()
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, HTTP: &http.Client{}, Name: fmt.Sprintf("%s:%d", host, os.Getpid())}
}

// Step is one training step as served.
type Step struct {
	// Number is the step's number: acknowledge it with Ack.
	Number int64
	// Versions are the policy versions of its tokens, ascending.
	Versions []int64
	// Groups and Rows count its groups and rows (a rank's slice: the
	// slice's).
	Groups, Rows int
	// Rank and World are the slice's (NextRank); StepGroups the groups
	// of the whole step (of a step whose slices some ranks of another
	// world acknowledged before it was cut anew, its remainder's). World
	// 0: the whole step.
	Rank, World, StepGroups int
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
// again when serve.lease runs out. A step whose answer a restart of the
// service cut short is served again to the retry. A step served again
// (its lease ran out, or the service restarted) comes whole whatever k
// asks: Step.Groups says its size.
func (c *Client) Next(ctx context.Context, k int, format string) (*Step, error) {
	if format == "" {
		format = FormatArrow
	}
	return c.nextStep(ctx, url.Values{"groups": {strconv.Itoa(k)}, "format": {format}})
}

// NextRank takes rank's slice of the next step of k groups for a
// data-parallel job of world ranks: every rank gets a disjoint slice of
// the same step (whole groups, balanced by tokens; Step.Number is the
// same). format is arrow ("") or jsonl. Acknowledge it with AckRank: the
// step is complete once every rank acknowledged its slice.
func (c *Client) NextRank(ctx context.Context, k, rank, world int, format string) (*Step, error) {
	if format == "" {
		format = FormatArrow
	}
	return c.nextStep(ctx, url.Values{"groups": {strconv.Itoa(k)}, "format": {format},
		"rank": {strconv.Itoa(rank)}, "world": {strconv.Itoa(world)}})
}

func (c *Client) nextStep(ctx context.Context, q url.Values) (*Step, error) {
	var st *Step
	err := c.retry(ctx, func() (err error) {
		st, err = c.next(ctx, q)
		return err
	})
	return st, err
}

func (c *Client) next(ctx context.Context, q url.Values) (*Step, error) {
	format := q.Get("format")
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
	st.Rank, _ = strconv.Atoi(h.Get(HeaderRank))
	st.World, _ = strconv.Atoi(h.Get(HeaderWorld))
	st.StepGroups = st.Groups
	if v := h.Get(HeaderStepGroups); v != "" {
		st.StepGroups, _ = strconv.Atoi(v)
	}
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
		if st.Body, err = io.ReadAll(resp.Body); err != nil {
			return nil, fmt.Errorf("trajflow serve: step %d: %w: %w", st.Number, errCut, err)
		}
		return st, nil
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
	var rows int64
	for _, rec := range st.Records {
		rows += rec.NumRows()
	}
	if h.Get(HeaderRows) != "" && rows != int64(st.Rows) {
		st.Release()
		return nil, fmt.Errorf("trajflow serve: step %d: %d rows of %d: %w", st.Number, rows, st.Rows, errCut)
	}
	return st, nil
}

// Ack acknowledges step n: it is done and never served again. Acking a
// step twice is harmless.
func (c *Client) Ack(ctx context.Context, n int64) error {
	return c.call(ctx, http.MethodPost, fmt.Sprintf("/v1/steps/%d/ack", n), nil, nil)
}

// AckRank acknowledges rank's slice of step n (NextRank): the step is
// done, never served again, once every rank of world acknowledged its
// slice. Acking twice is harmless.
func (c *Client) AckRank(ctx context.Context, n int64, rank, world int) error {
	return c.call(ctx, http.MethodPost, fmt.Sprintf("/v1/steps/%d/ack?rank=%d&world=%d", n, rank, world), nil, nil)
}

// AckLogprobs acknowledges step n with the trainer's own logprobs of its
// generated tokens: per row in the step's row order, each row's tokens
// whose loss_mask is 1, in order ([] for a row without token ids). The
// service measures the drift from the engine's (Status.Drift) and
// answers it. rank and world as for AckRank (world 0: the whole step).
func (c *Client) AckLogprobs(ctx context.Context, n int64, rank, world int, logprobs [][]float32) (*StepDrift, error) {
	path := fmt.Sprintf("/v1/steps/%d/ack", n)
	if world > 0 {
		path += fmt.Sprintf("?rank=%d&world=%d", rank, world)
	}
	var out struct {
		Drift *StepDrift `json:"drift"`
	}
	err := c.call(ctx, http.MethodPost, path, ackF32(logprobs), &out)
	return out.Drift, err
}

// ContentTypeF32 is the media type of the raw ack body (AckLogprobs):
// the trainer's logprobs as little-endian float32 values, every row's in
// the step's row order, each row's in token order, with nothing between
// them: the service splits them by the rows it answered. 4 bytes a token,
// with no JSON to scan and no base64 to decode.
const ContentTypeF32 = "application/octet-stream"

// ackF32 is the raw ack body of logprobs (ContentTypeF32).
func ackF32(logprobs [][]float32) rawBody {
	n := 0
	for _, row := range logprobs {
		n += len(row)
	}
	b := make([]byte, 0, 4*n)
	for _, row := range logprobs {
		for _, v := range row {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return rawBody{contentType: ContentTypeF32, b: b}
}

// rawBody is a request body written by its caller, of its media type.
type rawBody struct {
	contentType string
	b           []byte
}

// SetPolicy tells the service that weights of version v are live on the
// fleet; versions only grow.
func (c *Client) SetPolicy(ctx context.Context, v int64) error {
	return c.call(ctx, http.MethodPost, "/v1/policy", map[string]int64{"version": v}, nil)
}

// Pause stops new generation until Resume, for a weight update; mode is
// abort or keep ("" takes serve.pause_mode). The service records it with
// its time and c.Name (GET /v1/status shows both).
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
	var b []byte
	contentType := "application/json"
	switch body := body.(type) {
	case nil:
	case rawBody:
		b, contentType = body.b, body.contentType
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return c.retry(ctx, func() error {
		var rd io.Reader
		if b != nil {
			rd = bytes.NewReader(b)
		}
		resp, err := c.doAs(ctx, method, path, rd, contentType)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
		if out == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}
		return json.NewDecoder(resp.Body).Decode(out)
	})
}

// do sends a request and turns an error answer into an *Error.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	return c.doAs(ctx, method, path, body, "application/json")
}

// doAs is do with a body of contentType.
func (c *Client) doAs(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.Name != "" {
		req.Header.Set(HeaderClient, c.Name)
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
