package openai

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// BatchConfig is the generate.batch section: how generate.api: batch cuts
// requests into Batch API batches and waits for them.
type BatchConfig struct {
	// MaxRequests is the most requests in one batch (the provider's limit).
	MaxRequests int `yaml:"max_requests"`
	// MaxBytes is the largest input file of one batch, in bytes (the
	// provider's limit).
	MaxBytes int64 `yaml:"max_bytes"`
	// FlushAfter submits the batch being filled once no request has joined
	// it for this long (the run has no more to send until results come
	// back), or at once when it is full.
	FlushAfter pipeline.Duration `yaml:"flush_after"`
	// PollInterval is how often a submitted batch's status is asked.
	PollInterval pipeline.Duration `yaml:"poll_interval"`
	// CompletionWindow is the batches' completion_window.
	CompletionWindow string `yaml:"completion_window"`
}

// Batch defaults.
const (
	DefaultBatchMaxRequests = 50000
	DefaultBatchMaxBytes    = 100_000_000
)

// SetDefaults fills the keys left unset.
func (c *BatchConfig) SetDefaults() {
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultBatchMaxRequests
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultBatchMaxBytes
	}
	if c.FlushAfter == 0 {
		c.FlushAfter = pipeline.Duration(2 * time.Second)
	}
	if c.PollInterval == 0 {
		c.PollInterval = pipeline.Duration(30 * time.Second)
	}
	if c.CompletionWindow == "" {
		c.CompletionWindow = "24h"
	}
}

// Validate reports every problem of the section at once.
func (c *BatchConfig) Validate() error {
	var p pipeline.Problems
	if c.MaxRequests < 1 {
		p.Add("max_requests", "must be >= 1, got %d", c.MaxRequests)
	}
	if c.MaxBytes < 1024 {
		p.Add("max_bytes", "must be >= 1024, got %d", c.MaxBytes)
	}
	if c.FlushAfter < 0 {
		p.Add("flush_after", "must be >= 0, got %s", c.FlushAfter.D())
	}
	if c.PollInterval <= 0 {
		p.Add("poll_interval", "must be > 0, got %s", c.PollInterval.D())
	}
	return p.Err()
}

// BatchOptions are the Batch API client's settings that do not come from
// the config file.
type BatchOptions struct {
	// APIKey is sent as "Authorization: Bearer KEY".
	APIKey string
	// HTTPClient sends the requests (default: a client of its own).
	HTTPClient *http.Client
	// StateFile is the output directory's batch state file (required).
	StateFile string
	// RunID is written into each batch's metadata.
	RunID string
	// Logf receives submissions and recoveries. Default: silent.
	Logf func(format string, args ...any)
}

// Metadata keys the client sets on its batches; a restarted run finds a
// batch whose create call it never heard back from by MetaKey.
const (
	MetaKey = "trajflow_key"
	MetaRun = "trajflow_run"
)

// BatchStats count the Batch API client's work.
type BatchStats struct {
	// Batches and Requests are what this run submitted; Recovered counts
	// the batches of earlier runs it collected results from.
	Batches, Requests, Recovered int64
	// Pending is the requests waiting for a batch's results now.
	Pending int
}

// BatchClient is generate.api: batch: each Complete joins a batch, and
// returns when the batch's results are in. Batches are recorded in the
// state file before each step (plan, upload, create), so a restarted run
// collects what an earlier run submitted instead of submitting it again.
type BatchClient struct {
	cfg    inference.Config
	bc     BatchConfig
	opts   BatchOptions
	base   string
	client *http.Client
	state  *stateLog

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	filling *batchRun            // the batch being filled; nil when none
	byID    map[string]*batchRun // custom_id → the batch that answers it
	timer   *time.Timer
	stats   BatchStats
}

var _ inference.Client = (*BatchClient)(nil)

// batchRun is one batch, from filling to its results.
type batchRun struct {
	key   string
	ids   []string
	lines bytes.Buffer
	file  string
	batch string

	collecting bool
	done       chan struct{}
	results    map[string]batchResult
	err        error // the whole batch failed
	waiting    int
}

type batchResult struct {
	resp *inference.Response
	err  error
}

// NewBatch builds the Batch API client for cfg's first endpoint and reads
// the state file: batches an earlier run created are collected when their
// requests come again; a batch whose create call was cut off is looked for
// among the server's batches by its key; the rest were never submitted.
func NewBatch(ctx context.Context, cfg inference.Config, bc BatchConfig, opts BatchOptions) (*BatchClient, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("generate.endpoints: the Batch API needs an endpoint")
	}
	base, _, _, err := normaliseEndpoint(cfg.Endpoints[0])
	if err != nil {
		return nil, fmt.Errorf("generate.endpoints[0]: %w", err)
	}
	if opts.StateFile == "" {
		return nil, errors.New("batch: no state file")
	}
	c := &BatchClient{cfg: cfg, bc: bc, opts: opts, base: base, client: opts.HTTPClient, byID: map[string]*batchRun{}}
	if c.client == nil {
		c.client = &http.Client{}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	state, planned, err := openState(opts.StateFile)
	if err != nil {
		return nil, err
	}
	c.state = state
	if err := c.recover(ctx, planned); err != nil {
		return nil, errors.Join(err, state.close())
	}
	return c, nil
}

func (c *BatchClient) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// recover takes up the batches of the state file.
func (c *BatchClient) recover(ctx context.Context, planned []*plannedBatch) error {
	var lost []*plannedBatch
	for _, p := range planned {
		if !p.Abandoned && p.Batch == "" && p.File != "" {
			lost = append(lost, p)
		}
	}
	if len(lost) > 0 {
		// The create call may have reached the server: find the batch by
		// its key before deciding it was never made.
		found, err := c.findBatches(ctx)
		if err != nil {
			return fmt.Errorf("batch: listing the server's batches to find one whose create call was cut off: %w", err)
		}
		for _, p := range lost {
			if id, ok := found[p.Key]; ok {
				p.Batch = id
				if err := c.state.append(stateEvent{Op: "batch", Key: p.Key, Batch: id}); err != nil {
					return err
				}
				c.logf("batch: found batch %s (key %s) that an earlier run created", id, p.Key)
			}
		}
	}
	for _, p := range planned {
		switch {
		case p.Abandoned:
		case p.Batch != "":
			b := &batchRun{key: p.Key, ids: p.IDs, file: p.File, batch: p.Batch, done: make(chan struct{})}
			for _, id := range p.IDs {
				c.byID[id] = b
			}
		default:
			// Planned (and maybe uploaded) but never created: nothing was
			// submitted; its requests join new batches when they come.
			if err := c.state.append(stateEvent{Op: "abandon", Key: p.Key}); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close stops polling; requests waiting fail. Submitted batches stay in
// the state file for the next run. It returns the state file's close
// error.
func (c *BatchClient) Close() error {
	c.cancel()
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return c.state.close()
}

// Stats returns the client's counters now.
func (c *BatchClient) Stats() BatchStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	return s
}

// CustomID is the custom_id of a request body: a hash of the body, the
// model and the sample, so the same request of a restarted run has the
// same id.
func CustomID(model string, body []byte, sample string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range [][]byte{[]byte(model), body, []byte(sample)} {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return "tf-" + hex.EncodeToString(h.Sum(nil)[:16])
}

const batchURL = "/v1/chat/completions"

// Complete implements inference.Client: the request joins a batch (or the
// batch of an earlier run that holds it) and Complete returns its result.
func (c *BatchClient) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	if req.PromptTokenIDs != nil {
		return nil, errors.New("batch: token-id prompts are not sent through the Batch API")
	}
	id, line, err := c.line(req)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		return nil, errors.New("batch: client is closed")
	}
	b := c.enqueueLocked(id, line)
	b.waiting++
	c.stats.Pending++
	c.mu.Unlock()

	defer func() {
		c.mu.Lock()
		b.waiting--
		c.stats.Pending--
		c.mu.Unlock()
	}()
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, errors.New("batch: client is closed")
	}
	c.mu.Lock()
	if c.byID[id] == b {
		// Answered: the same request again (a retry) goes to a new batch.
		delete(c.byID, id)
	}
	c.mu.Unlock()
	if b.err != nil {
		return nil, b.err
	}
	r, ok := b.results[id]
	if !ok {
		return nil, &inference.Error{Class: inference.ClassServer, Msg: fmt.Sprintf("batch %s has no result for this request (custom_id %s)", b.batch, id)}
	}
	if r.err != nil {
		return nil, r.err
	}
	resp := *r.resp
	return &resp, nil
}

// line is req's line of a batch input file, and its custom_id.
func (c *BatchClient) line(req *inference.Request) (id string, line []byte, err error) {
	if req.Model == "" {
		r := *req
		r.Model = c.cfg.Model
		req = &r
	}
	body, err := encodeRequest(req, false)
	if err != nil {
		return "", nil, err
	}
	id = CustomID(req.Model, body, req.Sample)
	line, err = json.Marshal(map[string]any{"custom_id": id, "method": http.MethodPost, "url": batchURL, "body": json.RawMessage(body)})
	if err != nil {
		return "", nil, err
	}
	line = append(line, '\n')
	if int64(len(line)) > c.bc.MaxBytes {
		return "", nil, &inference.Error{Class: inference.ClassHTTP, Msg: fmt.Sprintf("batch: the request's line (%d bytes) is over generate.batch.max_bytes (%d)", len(line), c.bc.MaxBytes)}
	}
	return id, line, nil
}

// enqueueLocked is the batch that answers the request id: the batch
// holding it already (one of an earlier run is collected from now on), or
// the batch filling, which line joins (flushed when full).
func (c *BatchClient) enqueueLocked(id string, line []byte) *batchRun {
	b := c.byID[id]
	if b == nil {
		b = c.filling
		if b != nil && (len(b.ids) >= c.bc.MaxRequests || int64(b.lines.Len()+len(line)) > c.bc.MaxBytes) {
			c.flushLocked()
			b = nil
		}
		if b == nil {
			b = &batchRun{key: newBatchKey(c.opts.RunID), done: make(chan struct{})}
			c.filling = b
		}
		b.ids = append(b.ids, id)
		b.lines.Write(line)
		c.byID[id] = b
		if len(b.ids) >= c.bc.MaxRequests {
			c.flushLocked()
		} else {
			c.armLocked()
		}
	} else if !b.collecting && b.batch != "" {
		// A batch of an earlier run, first asked for now.
		b.collecting = true
		c.stats.Recovered++
		c.wg.Add(1)
		go c.collect(b)
	}
	return b
}

func newBatchKey(run string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	if len(run) > 40 {
		run = run[:40]
	}
	return fmt.Sprintf("%s-%d-%s", run, time.Now().Unix(), hex.EncodeToString(rnd[:]))
}

// armLocked (re)starts the timer that submits the filling batch once no
// request has joined it for FlushAfter.
func (c *BatchClient) armLocked() {
	b := c.filling
	d := c.bc.FlushAfter.D()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.filling == b && c.ctx.Err() == nil {
			c.flushLocked()
		}
	})
}

// flushLocked submits the filling batch.
func (c *BatchClient) flushLocked() {
	b := c.filling
	c.filling = nil
	if c.timer != nil {
		c.timer.Stop()
	}
	if b == nil || len(b.ids) == 0 {
		return
	}
	b.collecting = true
	c.stats.Batches++
	c.stats.Requests += int64(len(b.ids))
	c.wg.Add(1)
	go func() {
		if err := c.submit(b); err != nil {
			var e *inference.Error
			switch {
			case errors.As(err, &e):
			case c.ctx.Err() != nil:
				err = &inference.Error{Class: inference.ClassCancelled, Msg: err.Error()}
			default:
				err = &inference.Error{Class: inference.ClassServer, Msg: err.Error()}
			}
			b.err = err
			close(b.done)
			c.wg.Done()
			return
		}
		c.collect(b)
	}()
}

// submit plans, uploads and creates b, recording each step first.
func (c *BatchClient) submit(b *batchRun) error {
	ctx := c.ctx
	if err := c.state.append(stateEvent{Op: "plan", Key: b.key, IDs: b.ids}); err != nil {
		return err
	}
	abandon := func(err error) error {
		if aerr := c.state.append(stateEvent{Op: "abandon", Key: b.key}); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return err
	}
	file, err := c.upload(ctx, b)
	if err != nil {
		return abandon(err)
	}
	b.file = file
	b.lines = bytes.Buffer{} // uploaded: the lines are the server's now
	if err := c.state.append(stateEvent{Op: "file", Key: b.key, File: file}); err != nil {
		return err
	}
	id, unknown, err := c.create(ctx, b)
	if err != nil {
		if !unknown {
			return abandon(err)
		}
		// The batch may exist: the state keeps its file, and the next
		// run looks for it by its key before anything else.
		return fmt.Errorf("%w (the batch may exist on the server: the next run of this output directory looks for it by its key %s)", err, b.key)
	}
	b.batch = id
	if err := c.state.append(stateEvent{Op: "batch", Key: b.key, Batch: id}); err != nil {
		return err
	}
	c.logf("batch: submitted %s: %d requests (key %s)", id, len(b.ids), b.key)
	return nil
}

// upload sends b's lines as a batch input file and returns its id.
func (c *BatchClient) upload(ctx context.Context, b *batchRun) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return "", err
	}
	fw, err := mw.CreateFormFile("file", b.key+".jsonl")
	if err != nil {
		return "", err
	}
	if _, err := fw.Write(b.lines.Bytes()); err != nil {
		return "", err
	}
	if err := mw.Close(); err != nil {
		return "", err
	}
	data := body.Bytes()
	var out struct {
		ID string `json:"id"`
	}
	err = c.retry(ctx, "upload the batch input file", func() (bool, error) {
		return c.call(ctx, http.MethodPost, c.base+"/files", mw.FormDataContentType(), data, &out)
	})
	if err == nil && out.ID == "" {
		err = errors.New("batch: the file upload answered no id")
	}
	return out.ID, err
}

// create creates b's batch. When a call's outcome is unknown (no answer,
// 5xx) the batch may exist: it is looked for by its key before trying
// again. unknown reports a failure after which the batch may still exist.
func (c *BatchClient) create(ctx context.Context, b *batchRun) (id string, unknown bool, err error) {
	body, _ := json.Marshal(map[string]any{
		"input_file_id": b.file, "endpoint": batchURL, "completion_window": c.bc.CompletionWindow,
		"metadata": map[string]string{MetaKey: b.key, MetaRun: c.opts.RunID},
	})
	var out struct {
		ID string `json:"id"`
	}
	err = c.retry(ctx, "create the batch", func() (bool, error) {
		again, err := c.call(ctx, http.MethodPost, c.base+"/batches", "application/json", body, &out)
		unknown = again
		if err == nil || !again {
			return again, err
		}
		found, ferr := c.findBatches(ctx)
		if ferr != nil {
			return true, errors.Join(err, ferr)
		}
		if id, ok := found[b.key]; ok {
			out.ID = id
			return false, nil
		}
		// Not there: the call did not create it.
		unknown = false
		return true, err
	})
	if err == nil && out.ID == "" {
		err = errors.New("batch: the batch create answered no id")
	}
	return out.ID, unknown, err
}

// findBatches lists the server's batches: key → batch id of those with a
// MetaKey.
func (c *BatchClient) findBatches(ctx context.Context) (map[string]string, error) {
	found := map[string]string{}
	after := ""
	for page := 0; page < 10000; page++ {
		u := c.base + "/batches?limit=100"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		var list struct {
			Data []struct {
				ID       string            `json:"id"`
				Metadata map[string]string `json:"metadata"`
			} `json:"data"`
			HasMore bool   `json:"has_more"`
			LastID  string `json:"last_id"`
		}
		err := c.retry(ctx, "list batches", func() (bool, error) {
			return c.call(ctx, http.MethodGet, u, "", nil, &list)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range list.Data {
			if k := d.Metadata[MetaKey]; k != "" {
				found[k] = d.ID
			}
		}
		if !list.HasMore || len(list.Data) == 0 {
			return found, nil
		}
		after = list.LastID
		if after == "" {
			after = list.Data[len(list.Data)-1].ID
		}
	}
	return found, nil
}

// collect polls b until it ends, reads its output and error files, and
// hands out the results.
func (c *BatchClient) collect(b *batchRun) {
	defer c.wg.Done()
	defer close(b.done)
	results, err := c.await(c.ctx, b)
	if err != nil {
		b.err = err
		return
	}
	b.results = results
}

type wireBatch struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	OutputFileID string `json:"output_file_id"`
	ErrorFileID  string `json:"error_file_id"`
	Errors       *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Line    *int   `json:"line"`
		} `json:"data"`
	} `json:"errors"`
}

func (c *BatchClient) await(ctx context.Context, b *batchRun) (map[string]batchResult, error) {
	var w wireBatch
	for {
		err := c.retry(ctx, "poll batch "+b.batch, func() (bool, error) {
			return c.call(ctx, http.MethodGet, c.base+"/batches/"+url.PathEscape(b.batch), "", nil, &w)
		})
		if err != nil {
			return nil, err
		}
		switch w.Status {
		case "completed", "expired", "cancelled":
		case "failed":
			msg := fmt.Sprintf("batch %s failed", b.batch)
			if w.Errors != nil {
				for _, e := range w.Errors.Data {
					msg += fmt.Sprintf("; %s: %s", e.Code, e.Message)
				}
			}
			return nil, &inference.Error{Class: inference.ClassHTTP, Msg: msg}
		default:
			if err := sleepCtx(ctx, c.bc.PollInterval.D()); err != nil {
				return nil, err
			}
			continue
		}
		break
	}
	results := make(map[string]batchResult, len(b.ids))
	for _, f := range []string{w.OutputFileID, w.ErrorFileID} {
		if f == "" {
			continue
		}
		if err := c.readResults(ctx, b.batch, f, results); err != nil {
			return nil, err
		}
	}
	for _, id := range b.ids {
		if _, ok := results[id]; !ok {
			results[id] = batchResult{err: &inference.Error{Class: inference.ClassServer, Msg: fmt.Sprintf("batch %s ended %s without a result for this request", b.batch, w.Status)}}
		}
	}
	c.logf("batch: %s %s: %d results", b.batch, w.Status, len(results))
	return results, nil
}

// readResults reads an output or error file into results.
func (c *BatchClient) readResults(ctx context.Context, batch, file string, results map[string]batchResult) error {
	var data []byte
	err := c.retry(ctx, "download file "+file, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/files/"+url.PathEscape(file)+"/content", nil)
		if err != nil {
			return false, err
		}
		c.auth(req)
		resp, err := c.client.Do(req)
		if err != nil {
			return true, err
		}
		defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
		data, err = io.ReadAll(resp.Body)
		if err != nil {
			return true, err
		}
		if resp.StatusCode/100 != 2 {
			return resp.StatusCode == 429 || resp.StatusCode >= 500, fmt.Errorf("HTTP %d: %s", resp.StatusCode, serverMessage(data))
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l batchOutLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.CustomID == "" {
			return fmt.Errorf("batch %s: file %s line %d: not a batch result line", batch, file, n)
		}
		results[l.CustomID] = resultOf(batch, l.Response, l.Error)
	}
	return sc.Err()
}

// batchOutLine is a line of a batch's output or error file.
type batchOutLine struct {
	CustomID string            `json:"custom_id"`
	Response *batchOutResponse `json:"response"`
	Error    *batchOutError    `json:"error"`
}

type batchOutResponse struct {
	StatusCode int             `json:"status_code"`
	Body       json.RawMessage `json:"body"`
}

type batchOutError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// resultOf turns a result line's response or error into a request's
// response or classified error.
func resultOf(batch string, resp *batchOutResponse, e *batchOutError) batchResult {
	if e != nil && (resp == nil || resp.StatusCode/100 != 2) {
		class := inference.ClassHTTP
		switch e.Code {
		case "batch_expired":
			class = inference.ClassTimeout
		case "batch_cancelled":
			class = inference.ClassCancelled
		}
		return batchResult{err: &inference.Error{Class: class, Msg: fmt.Sprintf("batch %s: %s: %s", batch, e.Code, e.Message)}}
	}
	if resp == nil {
		return batchResult{err: &inference.Error{Class: inference.ClassBadResponse, Msg: fmt.Sprintf("batch %s: a result line with neither response nor error", batch)}}
	}
	st := resp.StatusCode
	if st/100 == 2 {
		r, err := decodeResponse(resp.Body)
		if err != nil {
			return batchResult{err: &inference.Error{Class: inference.ClassBadResponse, Status: st, Msg: fmt.Sprintf("batch %s: %v", batch, err)}}
		}
		r.Endpoint = "batch " + batch
		return batchResult{resp: r}
	}
	class := inference.ClassHTTP
	switch {
	case st == http.StatusTooManyRequests:
		class = inference.ClassRateLimited
	case st >= 500:
		class = inference.ClassServer
	case isContextLength(resp.Body):
		class = inference.ClassContextLength
	}
	return batchResult{err: &inference.Error{Class: class, Status: st, Msg: fmt.Sprintf("batch %s: %s", batch, serverMessage(resp.Body))}}
}

func (c *BatchClient) auth(req *http.Request) {
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
}

// call sends one request and decodes a 2xx JSON answer into out. again
// says whether a failure may pass (connection, 429, 5xx).
func (c *BatchClient) call(ctx context.Context, method, u, contentType string, body []byte, out any) (again bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	tctx := ctx
	if t := c.cfg.Timeout.D(); t > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(tctx, method, u, rd)
	if err != nil {
		return false, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	c.auth(req)
	resp, err := c.client.Do(req)
	if err != nil {
		var ne net.Error
		return ctx.Err() == nil || errors.As(err, &ne), fmt.Errorf("%s %s: %v", method, redactQuery(u), stripURL(err))
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return true, fmt.Errorf("%s %s: %v", method, redactQuery(u), err)
	}
	if resp.StatusCode/100 != 2 {
		err := fmt.Errorf("%s %s: HTTP %d: %s", method, redactQuery(u), resp.StatusCode, serverMessage(data))
		if resp.StatusCode == http.StatusNotFound && strings.Contains(u, "/batches") {
			err = fmt.Errorf("%w (generate.api: batch needs a server with the Batch API: OpenAI's, or `trajflow sim-server`)", err)
		}
		return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("%s %s: %v", method, redactQuery(u), err)
	}
	return false, nil
}

func redactQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// retry runs f until it succeeds, fails for good, or MaxAttempts are
// spent, with the configured backoff between tries.
func (c *BatchClient) retry(ctx context.Context, what string, f func() (again bool, err error)) error {
	attempts := c.cfg.MaxAttempts
	if attempts < 1 {
		attempts = 1
	}
	delay := c.cfg.BackoffBase.D()
	for i := 1; ; i++ {
		again, err := f()
		if err == nil {
			return nil
		}
		if !again || i >= attempts || ctx.Err() != nil {
			return fmt.Errorf("batch: %s: %w", what, err)
		}
		c.logf("batch: %s: %v; trying again in %s", what, err, delay)
		if serr := sleepCtx(ctx, delay); serr != nil {
			return fmt.Errorf("batch: %s: %w", what, err)
		}
		delay = time.Duration(math.Min(float64(2*delay), float64(c.cfg.BackoffMax.D())))
	}
}

// CheckBatchAPI makes sure cfg's first endpoint serves the Batch API: it
// lists one batch (GET /v1/batches?limit=1).
func CheckBatchAPI(ctx context.Context, cfg inference.Config, apiKey string) error {
	c := &BatchClient{cfg: cfg, opts: BatchOptions{APIKey: apiKey}, client: &http.Client{Timeout: DefaultPreflightTimeout}}
	if len(cfg.Endpoints) == 0 {
		return errors.New("generate.endpoints: none")
	}
	base, _, _, err := normaliseEndpoint(cfg.Endpoints[0])
	if err != nil {
		return fmt.Errorf("generate.endpoints[0]: %w", err)
	}
	c.base = base
	var list struct {
		Object string `json:"object"`
	}
	if _, err := c.call(ctx, http.MethodGet, base+"/batches?limit=1", "", nil, &list); err != nil {
		return fmt.Errorf("generate.api: batch: %w", err)
	}
	return nil
}
