package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/envs"
)

// DefaultMaxBody is the largest request body accepted when
// Options.MaxBody is 0.
const DefaultMaxBody = 32 << 20

// Options configure a Server.
type Options struct {
	// Addr is the host:port to listen on; "" is "127.0.0.1:0" (the
	// loopback interface, a free port).
	Addr string
	// Model is the model name GET /v1/models lists. Calls naming any
	// model are accepted (the name is not checked).
	Model string
	// MaxBody is the largest request body accepted, in bytes; 0 is
	// DefaultMaxBody. A larger body is refused 413 in the API's error
	// shape.
	MaxBody int64
	// Log receives a line per refused or failed call (never a key);
	// nil discards them.
	Log *slog.Logger
}

// Server is the agent gateway: an HTTP server whose sessions each
// answer an agent's calls with their own Model. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger
	h    http.Handler

	// base is the parent of every Model call's context besides the
	// request's own; Close cancels it when its ctx ends before the calls
	// in flight returned.
	base       context.Context
	cancelBase context.CancelFunc

	mu       sync.Mutex
	sessions map[string]*session
	ln       net.Listener
	srv      *http.Server
	closed   bool

	stats stats
}

// New returns a Server for opts; it listens once Start is called (or
// serves through Handler).
func New(opts Options) *Server {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, log: log, sessions: map[string]*session{}}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.h = http.HandlerFunc(s.serveHTTP)
	return s
}

// Start listens on Options.Addr and serves in the background until
// Close.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("gateway: start: the server is closed")
	}
	if s.ln != nil {
		return errors.New("gateway: start: already started")
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listen on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("gateway: serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return nil
}

// Addr is the address listened on (host:port) once Start returned;
// before, Options.Addr.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.opts.Addr
}

// Handler is the server's HTTP handler, for tests and for embedding in
// another server (then session URLs name Addr, which the embedder sets
// through Options.Addr).
func (s *Server) Handler() http.Handler { return s.h }

// Close stops listening and ends every session: later calls are
// refused, and Close waits for the calls in flight. When ctx ends first
// their Model contexts are cancelled, the connections are closed and
// ctx's error is returned.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	srv := s.srv
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		for _, ss := range all {
			ss.end()
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.cancelBase()
		err = fmt.Errorf("gateway: close: calls still in flight: %w", ctx.Err())
	}
	if srv != nil {
		// Every call has ended (or been cancelled): the connections are
		// given a moment to flush their last answers, then closed. One an
		// agent opened and never sent a request on counts as busy to
		// Shutdown for 5 s; it holds nothing, so it is no error.
		sctx, cancel := context.WithTimeout(ctx, shutdownGrace)
		if e := srv.Shutdown(sctx); e != nil {
			_ = srv.Close()
			switch {
			case err != nil:
			case !errors.Is(e, context.DeadlineExceeded):
				err = fmt.Errorf("gateway: close: %w", e)
			case ctx.Err() != nil:
				err = fmt.Errorf("gateway: close: %w", ctx.Err())
			}
		}
		cancel()
	}
	s.cancelBase()
	return err
}

// shutdownGrace is how long Close waits for connections to go idle once
// no call is in flight.
const shutdownGrace = time.Second

// session is one rollout's session.
type session struct {
	s     *Server
	id    string
	key   [32]byte // sha256 of the key: compared in constant time
	model Model

	mu        sync.Mutex
	ended     bool
	reward    float64
	hasReward bool
	inflight  sync.WaitGroup
	calls     atomic.Int64
	endOnce   sync.Once
}

// Open opens a session answered by m; its URLs name Addr, so a server
// that listens opens sessions after Start. Its End must be called once
// its rollout is over (Close ends the sessions left). A session opened
// after Close is ended already.
func (s *Server) Open(m Model) envs.Session {
	ss := &session{s: s, id: randomHex(16), model: m}
	key := "tf-" + randomHex(32)
	ss.key = sha256.Sum256([]byte(key))

	s.mu.Lock()
	if s.closed {
		ss.ended = true
	} else {
		s.sessions[ss.id] = ss
	}
	s.mu.Unlock()
	s.stats.sessionsOpened.Add(1)
	if !ss.ended {
		s.stats.sessionsOpen.Add(1)
	}

	base := "http://" + s.Addr() + "/s/" + ss.id
	return envs.Session{
		ID:               ss.id,
		Key:              key,
		OpenAIBaseURL:    base + "/v1",
		AnthropicBaseURL: base,
		RewardURL:        base + "/reward",
		Reward: func() (float64, bool) {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.reward, ss.hasReward
		},
		Calls: func() int { return int(ss.calls.Load()) },
		End:   ss.end,
	}
}

// end refuses later calls and waits for those in flight. Their Model
// contexts are not cancelled.
func (ss *session) end() {
	ss.endOnce.Do(func() {
		ss.mu.Lock()
		wasOpen := !ss.ended
		ss.ended = true
		ss.mu.Unlock()
		ss.s.mu.Lock()
		delete(ss.s.sessions, ss.id)
		ss.s.mu.Unlock()
		if wasOpen {
			ss.s.stats.sessionsOpen.Add(-1)
		}
	})
	ss.inflight.Wait()
}

// begin admits a call: false when the session ended. A call admitted
// must call inflight.Done.
func (ss *session) begin() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return false
	}
	ss.inflight.Add(1)
	return true
}

// authorized says whether r carries the session's key (Authorization:
// Bearer KEY, or x-api-key: KEY).
func (ss *session) authorized(r *http.Request) bool {
	ok := 0
	if a := r.Header.Get("Authorization"); a != "" {
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			h := sha256.Sum256([]byte(strings.TrimSpace(a[7:])))
			ok |= subtle.ConstantTimeCompare(h[:], ss.key[:])
		}
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		h := sha256.Sum256([]byte(k))
		ok |= subtle.ConstantTimeCompare(h[:], ss.key[:])
	}
	return ok == 1
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("gateway: crypto/rand: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

// route is what a path under /s/{id}/ names.
type route int

const (
	routeNone route = iota
	routeChat
	routeResponses
	routeMessages
	routeModels
	routeModel
	routeReward
)

// parsePath splits /s/{id}/REST into the session id and the route.
func parsePath(p string) (id string, rt route, model string) {
	rest, ok := strings.CutPrefix(p, "/s/")
	if !ok {
		return "", routeNone, ""
	}
	id, rest, ok = strings.Cut(rest, "/")
	if !ok || id == "" {
		return "", routeNone, ""
	}
	rest = strings.TrimSuffix(rest, "/")
	switch rest {
	case "v1/chat/completions":
		return id, routeChat, ""
	case "v1/responses":
		return id, routeResponses, ""
	case "v1/messages":
		return id, routeMessages, ""
	case "v1/models":
		return id, routeModels, ""
	case "reward":
		return id, routeReward, ""
	}
	if m, ok := strings.CutPrefix(rest, "v1/models/"); ok && m != "" {
		return id, routeModel, m
	}
	return id, routeNone, ""
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if strings.TrimSuffix(r.URL.Path, "/") == gymPath {
		s.serveGym(w, r, start)
		return
	}
	id, rt, modelName := parsePath(r.URL.Path)
	shape := shapeOpenAI
	if rt == routeMessages {
		shape = shapeAnthropic
	}
	refuse := func(e *reqError) {
		s.stats.refused.Add(1)
		s.log.Info("gateway: call refused", "session", id, "path", redactPath(r.URL.Path), "status", e.Status, "err", e.Error())
		writeError(w, shape, e)
	}

	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if id == "" {
		refuse(&reqError{Status: http.StatusNotFound, Msg: "the gateway's routes are under /s/{session id}/: use the session's base URL"})
		return
	}
	if ss == nil {
		refuse(&reqError{Status: http.StatusNotFound, Msg: "no open session has this id (unknown, or ended)"})
		return
	}
	if !ss.authorized(r) {
		refuse(&reqError{Status: http.StatusUnauthorized, Msg: "the API key is missing or is not this session's (send Authorization: Bearer KEY or x-api-key: KEY)"})
		return
	}
	if rt == routeNone {
		refuse(&reqError{Status: http.StatusNotFound, Msg: fmt.Sprintf("no route %s %s (the gateway serves v1/chat/completions, v1/responses, v1/messages, v1/models and reward)", r.Method, redactPath(r.URL.Path))})
		return
	}
	want := http.MethodPost
	if rt == routeModels || rt == routeModel {
		want = http.MethodGet
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		refuse(&reqError{Status: http.StatusMethodNotAllowed, Msg: fmt.Sprintf("method %s is not allowed here; use %s", r.Method, want)})
		return
	}
	if !ss.begin() {
		refuse(&reqError{Status: http.StatusNotFound, Msg: "no open session has this id (unknown, or ended)"})
		return
	}
	defer ss.inflight.Done()

	switch rt {
	case routeModels:
		writeJSON(w, http.StatusOK, mustJSON(map[string]any{"object": "list", "data": []any{s.modelObject(s.opts.Model)}}))
		return
	case routeModel:
		if modelName != s.opts.Model {
			refuse(&reqError{Status: http.StatusNotFound, Param: "model", Msg: fmt.Sprintf("no model %q here (this gateway lists %q)", modelName, s.opts.Model)})
			return
		}
		writeJSON(w, http.StatusOK, mustJSON(s.modelObject(modelName)))
		return
	}

	body, e := s.readBody(w, r)
	if e != nil {
		refuse(e)
		return
	}

	if rt == routeReward {
		rw, e := parseReward(body)
		if e != nil {
			refuse(e)
			return
		}
		ss.mu.Lock()
		ss.reward, ss.hasReward = rw, true
		ss.mu.Unlock()
		writeJSON(w, http.StatusOK, []byte(`{"ok":true}`))
		return
	}

	var api apiCodec
	switch rt {
	case routeChat:
		api = chatCodec{}
	case routeResponses:
		api = responsesCodec{}
	default:
		api = messagesCodec{}
	}
	call, req, e := api.parse(body)
	if e != nil {
		refuse(e)
		return
	}
	s.answerCall(w, r, ss, api, call, req, shape, start)
}

// readBody reads r's body, at most Options.MaxBody bytes (413 beyond).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *reqError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &reqError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the request body is over %d bytes, the most this gateway accepts", s.opts.MaxBody)}
		}
		return nil, &reqError{Status: http.StatusBadRequest, Msg: "reading the request body: " + err.Error()}
	}
	return body, nil
}

// answerCall has ss's Model answer call and writes the answer in api's
// form (streamed when the agent asked for a stream).
func (s *Server) answerCall(w http.ResponseWriter, r *http.Request, ss *session, api apiCodec, call *Call, req *echo, shape errShape, start time.Time) {
	id := ss.id
	if req.Model == "" { // the Responses API's model is optional
		req.Model = s.opts.Model
	}

	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.base, cancel)
	t0 := time.Now()
	ans, err := ss.model.Call(ctx, call)
	inModel := time.Since(t0)
	stop()
	cancel()
	s.stats.calls.Add(1)
	s.stats.byAPI(call.API).Add(1)
	if err == nil && ans == nil {
		err = errors.New("the model returned no answer and no error")
	}
	if err != nil {
		s.stats.errors.Add(1)
		if r.Context().Err() != nil {
			s.log.Info("gateway: the agent hung up", "session", id, "api", call.API)
			return // nobody to answer
		}
		var ce *CallError
		if errors.As(err, &ce) {
			writeError(w, shape, &reqError{Status: ce.Status, Msg: ce.Message})
		} else {
			s.log.Warn("gateway: model call failed", "session", id, "api", call.API, "err", err)
			writeError(w, shape, &reqError{Status: http.StatusBadGateway, Msg: "the model call failed"})
		}
		return
	}
	a := normalize(ans)
	if e := api.check(a); e != nil {
		s.stats.errors.Add(1)
		s.log.Warn("gateway: answer cannot be sent", "session", id, "api", call.API, "err", e.Error())
		writeError(w, shape, e)
		return
	}
	ss.calls.Add(1)
	ids := newIDs()
	if call.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		sw := newSSE(w)
		api.stream(sw, req, a, ids)
		sw.flush()
	} else {
		writeJSON(w, http.StatusOK, mustJSON(api.render(req, a, ids)))
	}
	s.stats.added.observe(time.Since(start) - inModel)
}

func (s *Server) modelObject(name string) map[string]any {
	return map[string]any{"id": name, "object": "model", "created": 0, "owned_by": "trajflow"}
}

// redactPath is p with the session id kept (it is no secret) but any
// query dropped.
func redactPath(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

func parseReward(body []byte) (float64, *reqError) {
	var v struct {
		Reward *float64 `json:"reward"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, badf("", "the body is not a JSON object {\"reward\": number}: %v", err)
	}
	if v.Reward == nil {
		return 0, badf("reward", "missing: send {\"reward\": number}")
	}
	return *v.Reward, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("gateway: marshal: " + err.Error()) // only maps, slices and strings of ours
	}
	return b
}

// apiCodec is one API's translation: a request body to a Call (and the
// request fields the answer echoes), an Answer to its response.
type apiCodec interface {
	parse(body []byte) (*Call, *echo, *reqError)
	check(a *Answer) *reqError
	render(req *echo, a *Answer, ids *ids) any
	stream(w *sse, req *echo, a *Answer, ids *ids)
}

// echo is what of the request a response repeats.
type echo struct {
	Model        string
	IncludeUsage bool
	Raw          obj
	// Gym is set on the NeMo Gym route (POST /v1/responses at the
	// root): the answer carries the token fields Gym's vllm_model adds.
	Gym bool
}

// ids are the ids of one response.
type ids struct {
	Resp    string
	Msg     string
	Created int64
}

func newIDs() *ids {
	return &ids{Resp: randomHex(12), Msg: randomHex(12), Created: time.Now().Unix()}
}

// normalize is a copy of a with every tool call given an id and a type
// and the finish reason set.
func normalize(a *Answer) *Answer {
	b := *a
	b.Message.ToolCalls = append([]pipelineToolCall(nil), a.Message.ToolCalls...)
	for i := range b.Message.ToolCalls {
		tc := &b.Message.ToolCalls[i]
		if tc.ID == "" {
			tc.ID = "call_" + randomHex(12)
		}
		if tc.Type == "" {
			tc.Type = "function"
		}
	}
	if b.FinishReason == "" {
		b.FinishReason = "stop"
		if len(b.Message.ToolCalls) > 0 {
			b.FinishReason = "tool_calls"
		}
	}
	return &b
}
