package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// Server is a simulated continuous-batching inference server. It is safe
// for concurrent use.
type Server struct {
	opts Options
	seed uint64

	start time.Time
	mu    sync.Mutex
	model *model
	// jobs are the requests in the model now (for AbortAll), each with
	// its SGLang rid ("" when none; AbortRID).
	jobs   map[*job]string
	wake   chan struct{}
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	limits  *limits   // nil: no rate limits
	batches *batchAPI // the Batch API's files and batches

	noSeed  atomic.Uint64
	faultN  atomic.Uint64
	instant struct {
		requests, prompt, decoded int64
	}
}

var _ inference.Client = (*Server)(nil)

// ErrClosed is returned for requests to a closed server.
var ErrClosed = errors.New("sim: server closed")

// New starts a simulated server. Close stops it.
func New(opts Options) *Server {
	o := opts.resolved()
	s := &Server{
		opts:   o,
		seed:   uint64(o.Seed),
		start:  time.Now(),
		wake:   make(chan struct{}, 1),
		closed: make(chan struct{}),
		jobs:   map[*job]string{},
	}
	s.limits = newLimits(o.RateLimit)
	s.batches = newBatchAPI()
	sc := o.TimeScale
	s.model = newModel(o.A.Seconds()*sc, o.C.Seconds()*sc, o.P.Seconds()*sc, o.Capacity)
	if sc > 0 {
		s.wg.Add(1)
		go s.loop()
	}
	return s
}

// Options returns the server's options with every default filled in.
func (s *Server) Options() Options { return s.opts }

// Close stops the server; requests waiting in it fail with ErrClosed.
func (s *Server) Close() {
	s.once.Do(func() { close(s.closed) })
	s.wg.Wait()
}

// now is the simulated time: seconds since the server started.
func (s *Server) now() float64 { return time.Since(s.start).Seconds() }

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop wakes up when the batch changes next and advances the model.
func (s *Server) loop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		tn, ok := s.model.next()
		s.mu.Unlock()
		var fire <-chan time.Time
		if ok {
			d := time.Until(s.start.Add(time.Duration(math.Ceil(tn * 1e9))))
			timer.Reset(max(d, 0))
			fire = timer.C
		}
		select {
		case <-s.closed:
			return
		case <-s.wake:
		case <-fire:
		}
		timer.Stop()
		s.mu.Lock()
		s.model.advance(s.now())
		s.mu.Unlock()
	}
}

// run puts one request of prompt tokens and n generated tokens, of the
// given scheduling priority (lower first), through the batching model and
// waits until it completes or ctx ends. It returns the tokens generated: n,
// or fewer for a request AbortAll cut short.
func (s *Server) run(ctx context.Context, prompt, n, priority int) (int, error) {
	if s.opts.TimeScale <= 0 {
		s.mu.Lock()
		s.instant.requests++
		s.instant.prompt += int64(prompt)
		s.instant.decoded += int64(n)
		s.mu.Unlock()
		return n, nil
	}
	select {
	case <-s.closed:
		return 0, ErrClosed
	default:
	}
	j := newJob(prompt, n)
	j.priority = priority
	s.mu.Lock()
	t := s.now()
	s.model.advance(t)
	s.model.arrive(t, j)
	s.jobs[j] = ridOf(ctx)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.jobs, j)
		s.mu.Unlock()
	}()
	s.poke()
	select {
	case <-j.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		if j.aborted && !j.finished {
			return min(j.emitted(), n), nil
		}
		return n, nil
	case <-ctx.Done():
	case <-s.closed:
	}
	s.mu.Lock()
	t = s.now()
	s.model.advance(t)
	s.model.cancel(t, j)
	finished := j.finished
	s.mu.Unlock()
	s.poke()
	if finished {
		return n, nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return 0, ErrClosed
}

// AbortAll cuts every request in the server short, as SGLang's
// POST /abort_request with abort_all does: a queued request leaves at
// once, a running one at the end of the step in progress, and each
// answers with the tokens it generated until then and finish reason
// "abort" (inference.FinishAbort). It returns the number of requests
// aborted. A server with time scale 0 answers at once and never has any.
func (s *Server) AbortAll() int {
	return s.abortWhere(func(string) bool { return true })
}

// abortWhere aborts the requests in the server (neither finished nor
// cancelled) whose rid match accepts, as AbortAll describes; it
// returns how many.
func (s *Server) abortWhere(match func(rid string) bool) int {
	s.mu.Lock()
	t := s.now()
	s.model.advance(t)
	n := 0
	for j, rid := range s.jobs {
		if j.finished || j.cancelled || !match(rid) {
			continue
		}
		j.aborted = true
		s.model.cancel(t, j)
		n++
	}
	s.mu.Unlock()
	s.poke()
	return n
}

// Abort is AbortAll as the inference.Aborter of the in-process server.
func (s *Server) Abort(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.AbortAll()
	return nil
}

var _ inference.Aborter = (*Server)(nil)

// cut makes rep the answer of a request aborted after k of its tokens:
// those tokens and their logprobs, their text, finish reason "abort".
func (rep *reply) cut(k int) {
	rep.ids = rep.ids[:k:k]
	rep.logprobs = rep.logprobs[:k:k]
	rep.text = Detokenize(rep.ids, true)
	rep.content = rep.text
	rep.toolCalls = nil
	rep.finish = inference.FinishAbort
}

// Stats are counters of the simulated server, for benchmarks.
type Stats struct {
	// Requests is the number of requests that completed generation.
	Requests int64
	// Cancelled is the number of requests that left before completing.
	Cancelled int64
	// PromptTokens and DecodedTokens are the tokens prefilled and generated.
	PromptTokens  int64
	DecodedTokens int64
	// Steps is the number of batch steps run.
	Steps int64
	// Busy is the simulated time with a non-empty batch (wall time, as the
	// time scale already applies).
	Busy time.Duration
	// MeanBatch is the mean number of running requests per step.
	MeanBatch float64
	// Running and Queued are the requests in the batch and waiting now.
	Running, Queued int
	// Preempted counts the requests taken out of a full batch for a
	// waiting one of higher priority; RecomputedTokens are the tokens they
	// prefilled again on resuming (included in PromptTokens).
	Preempted        int64
	RecomputedTokens int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.model
	st := Stats{
		Requests:      m.completed + s.instant.requests,
		Cancelled:     m.cancelled,
		PromptTokens:  m.prompts + s.instant.prompt,
		DecodedTokens: m.decoded + s.instant.decoded,
		Steps:         m.steps,
		Busy:          time.Duration(m.busy * 1e9),
		Running:       len(m.run),
		Queued:        len(m.queue),

		Preempted:        m.preempted,
		RecomputedTokens: m.recomputed,
	}
	if m.steps > 0 {
		st.MeanBatch = float64(m.decoded) / float64(m.steps)
	}
	return st
}

// Complete generates one reply in-process. The response carries token ids
// and logprobs always (Message.TokenIDs, Message.Logprobs,
// PromptTokenIDs) and the sim trailer, and, for a token-id request that
// asks (Request.RoutedExperts) to a MoE model (Options.MoE), its routes. Errors are *inference.Error (faults,
// context length, bad parameters) or ctx's error.
func (s *Server) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	var in *input
	var err error
	if req.PromptTokenIDs != nil {
		in, err = s.tokenInput(req.PromptTokenIDs, req.Params)
	} else {
		in, err = s.chatInput(req.Messages, req.Params, req.Tools)
	}
	if err != nil {
		return nil, &inference.Error{Class: inference.ClassHTTP, Status: 400, Msg: err.Error()}
	}
	switch f := s.drawFault(); f.kind {
	case faultStatus:
		class := inference.ClassHTTP
		switch {
		case f.status == 429:
			class = inference.ClassRateLimited
		case f.status >= 500:
			class = inference.ClassServer
		}
		return nil, &inference.Error{Class: class, Status: f.status, Msg: "injected fault"}
	case faultReset:
		return nil, &inference.Error{Class: inference.ClassConnection, Msg: "injected connection reset"}
	case faultMalformed, faultTruncate:
		return nil, &inference.Error{Class: inference.ClassBadResponse, Msg: "injected malformed response"}
	case faultStall:
		if err := s.stall(ctx); err != nil {
			return nil, err
		}
	}
	rep, err := s.generate(in)
	if err != nil {
		var cl *contextLengthError
		if errors.As(err, &cl) {
			return nil, &inference.Error{Class: inference.ClassContextLength, Status: 400, Msg: err.Error()}
		}
		return nil, &inference.Error{Class: inference.ClassHTTP, Status: 400, Msg: err.Error()}
	}
	prio := 0
	if req.Priority != nil {
		prio = *req.Priority
	}
	k, err := s.run(ctx, len(in.promptIDs), len(rep.ids), prio)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if k < len(rep.ids) {
		rep.cut(k)
	}
	trailer, _ := json.Marshal(rep.trailer)
	if req.PromptTokenIDs != nil {
		// A token-id prompt gets text, as /v1/completions answers it: the
		// caller parses tool calls out of it.
		rep.content, rep.toolCalls = rep.text, nil
	}
	var routes *pipeline.Routes
	if req.RoutedExperts && req.PromptTokenIDs != nil && s.opts.MoE.On() {
		// As the engines started to return routes answer (vLLM, SGLang).
		routes = s.opts.MoE.Routes(int64(s.seed), slices.Concat(in.promptIDs, rep.ids))
	}
	return &inference.Response{
		Routes: routes,
		Message: pipeline.Message{
			Role:      pipeline.RoleAssistant,
			Content:   rep.content,
			ToolCalls: rep.toolCalls,
			TokenIDs:  rep.ids,
			Logprobs:  rep.logprobs,
			Turn:      in.turn + 1,
		},
		PromptTokenIDs:   in.promptIDs,
		FinishReason:     rep.finish,
		PromptTokens:     len(in.promptIDs),
		CompletionTokens: len(rep.ids),
		Extra:            trailer,
		Endpoint:         "sim://",
	}, nil
}

// MaxModelLen is Options.MaxModelLen: the context the server enforces (0:
// none).
func (s *Server) MaxModelLen() int { return s.opts.MaxModelLen }

// Tokenize renders req's messages with the simulator's chat template, as
// POST /tokenize does.
func (s *Server) Tokenize(ctx context.Context, req *inference.TokenizeRequest) ([]int32, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if req.Raw {
		return Tokenize(req.Text), nil
	}
	return s.template().TemplateFor(req.TemplateArgs["chat_template_kwargs"]).Render(req.Messages, req.Tools, req.AddGenerationPrompt), nil
}

var _ inference.Tokenizer = (*Server)(nil)

// Detokenize spells ids, special ids included, as POST /detokenize does.
func (s *Server) Detokenize(ctx context.Context, _ string, ids []int32) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("sim: %w", err)
	}
	return Detokenize(ids, false), nil
}

var _ inference.Detokenizer = (*Server)(nil)

func (s *Server) stall(ctx context.Context) error {
	t := time.NewTimer(s.opts.Faults.StallFor)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return ErrClosed
	}
}

type faultKind int

const (
	faultNone faultKind = iota
	faultStatus
	faultReset
	faultStall
	faultMalformed
	faultTruncate
)

type fault struct {
	kind   faultKind
	status int
}

// drawFault draws the next request's fault from (fault seed, counter).
func (s *Server) drawFault() fault {
	f := &s.opts.Faults
	if f.total() == 0 {
		return fault{}
	}
	u := uniform(key(uint64(f.Seed), domFault, s.faultN.Add(1)))
	codes := make([]int, 0, len(f.Errors))
	for c := range f.Errors {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		if u < f.Errors[c] {
			return fault{kind: faultStatus, status: c}
		}
		u -= f.Errors[c]
	}
	for _, k := range []struct {
		kind faultKind
		p    float64
	}{{faultReset, f.Reset}, {faultStall, f.Stall}, {faultMalformed, f.Malformed}, {faultTruncate, f.Truncate}} {
		if u < k.p {
			return fault{kind: k.kind}
		}
		u -= k.p
	}
	return fault{}
}
