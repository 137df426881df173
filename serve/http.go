package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
)

// The response headers and formats of a step (see the client package).
const (
	HeaderRank       = client.HeaderRank
	HeaderWorld      = client.HeaderWorld
	HeaderStepGroups = client.HeaderStepGroups
	HeaderStep       = client.HeaderStep
	HeaderVersions   = client.HeaderVersions
	HeaderGroups     = client.HeaderGroups
	HeaderRows       = client.HeaderRows
	FormatArrow      = client.FormatArrow
	FormatParquet    = client.FormatParquet
	FormatJSONL      = client.FormatJSONL
)

var contentTypes = map[string]string{
	FormatArrow:   "application/vnd.apache.arrow.stream",
	FormatParquet: "application/vnd.apache.parquet",
	FormatJSONL:   "application/x-ndjson",
}

// apiError is the body of every error answer: the problem and, when one
// is to blame, the request parameter, else a reason (client.Reason*);
// a 409 of a policy version names the current one.
type apiError struct {
	Error         string `json:"error"`
	Parameter     string `json:"parameter,omitempty"`
	Reason        string `json:"reason,omitempty"`
	PolicyVersion *int64 `json:"policy_version,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers an error that blames a request parameter: the messages
// name it and never repeat its value.
func fail(w http.ResponseWriter, code int, param, format string, args ...any) {
	writeJSON(w, code, apiError{Error: fmt.Sprintf(format, args...), Parameter: param})
}

// failReason answers an error that blames no parameter, with its reason
// (client.Reason*).
func failReason(w http.ResponseWriter, code int, reason, format string, args ...any) {
	writeJSON(w, code, apiError{Error: fmt.Sprintf(format, args...), Reason: reason})
}

// handler is the service's HTTP API.
type handler struct {
	// driftRatio is serve.drift_ratio: the c of the drift's outside
	// share.
	driftRatio float64
	s          *service
	// token is the bearer token every request but /healthz carries; ""
	// when none is required (loopback).
	token     string
	pauseMode generate.PauseMode
	logf      func(format string, args ...any)
}

// route is one endpoint of the API.
type route struct {
	method, path string
	handle       http.HandlerFunc
	// open: served without the bearer token.
	open bool
	// maxBody is the largest body (0: MaxBody).
	maxBody int64
}

// routeTable is the API: every endpoint, once. The mux, and the 405s of a
// path asked with another method, are built from it.
func (h *handler) routeTable() []route {
	return []route{
		{"GET", "/healthz", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}, true, 0},
		{"GET", "/v1/steps/next", h.next, false, 0},
		{"POST", "/v1/steps/{n}/ack", h.ack, false, MaxAckBody},
		{"POST", "/v1/policy", h.setPolicy, false, 0},
		{"POST", "/v1/pause", h.pause, false, 0},
		{"POST", "/v1/resume", h.resume, false, 0},
		{"GET", "/v1/status", h.status, false, 0},
	}
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	var paths []string
	allowed := map[string][]string{}
	for _, rt := range h.routeTable() {
		limit := rt.maxBody
		if limit == 0 {
			limit = MaxBody
		}
		handle := limitBody(rt.handle, limit)
		if !rt.open {
			handle = h.auth(handle)
		}
		mux.HandleFunc(rt.method+" "+rt.path, handle)
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// The API's paths with another method: 405 naming the allowed ones.
	for _, path := range paths {
		allow := strings.Join(allowed[path], ", ")
		mux.HandleFunc(path, h.auth(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			fail(w, http.StatusMethodNotAllowed, "method", "%s %s: use %s", r.Method, path, allow)
		}))
	}
	// The path is not repeated: it may hold anything, a secret included.
	mux.HandleFunc("/", h.auth(func(w http.ResponseWriter, r *http.Request) {
		failReason(w, http.StatusNotFound, client.ReasonNoSuchEndpoint, "no such endpoint: the paths are /healthz and /v1/... (see docs/serve.md)")
	}))
	return mux
}

// limitBody reads a request's body before its handler, whatever the
// endpoint: over limit bytes it is a 413 naming body, and the handler
// reads the body from memory.
func limitBody(next http.HandlerFunc, limit int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := readBody(w, r, limit)
		if !ok {
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, b)))
	}
}

// bodyKey is the context key of a request's body as limitBody read it.
type bodyKey struct{}

// bodyOf is r's body as limitBody read it, within its route's bound (an
// ack's may be tens of megabytes): handlers take it from here.
func bodyOf(r *http.Request) []byte {
	b, _ := r.Context().Value(bodyKey{}).([]byte)
	return b
}

// errorAnswers are the HTTP answers of the service's errors, matched with
// errors.Is: the status and the parameter to blame. Any other error is a
// 500.
var errorAnswers = []struct {
	err           error
	code          int
	param, reason string
}{
	{errNeverServed, http.StatusNotFound, "step", ""},
	{errVersionBelow, http.StatusConflict, "version", ""},
	{errPauseMode, http.StatusBadRequest, "mode", ""},
	{errWorld, http.StatusBadRequest, "world", ""},
	{errEnded, http.StatusServiceUnavailable, "", client.ReasonEnded},
	{errStopping, http.StatusServiceUnavailable, "", client.ReasonStopping},
}

// diskFullRetryAfter is the Retry-After, in seconds, of a change the
// service could not record for a full disk.
const diskFullRetryAfter = 10

// diskFault reports whether err is a change the state file could not
// record for a fault of the disk (full, or an I/O error), and the answer's
// reason: nothing of the change was done, and a retry (which writes the
// state to a new file) records it once the disk is well.
func diskFault(err error) (reason string, ok bool) {
	switch {
	case !errors.Is(err, errNotRecorded):
		return "", false
	case durable.DiskFull(err):
		return client.ReasonDiskFull, true
	case durable.IOError(err):
		return client.ReasonIOError, true
	}
	return "", false
}

// failWith answers an error of the service: its status from errorAnswers;
// a change not recorded for a fault of the disk (diskFault) a 503 (reason
// disk_full or io_error) with Retry-After, logged: nothing of it was done,
// and a retry once the disk is well records it; else a 500 (reason
// internal), logged.
func (h *handler) failWith(w http.ResponseWriter, err error) {
	if reason, ok := diskFault(err); ok {
		what := "the disk is full"
		if reason == client.ReasonIOError {
			what = "the disk reported an I/O error"
		}
		h.logf("%v: answered 503 (retry after %d s) until the disk is well", err, diskFullRetryAfter)
		w.Header().Set("Retry-After", strconv.Itoa(diskFullRetryAfter))
		failReason(w, http.StatusServiceUnavailable, reason,
			"%v: %s and nothing of the change was done; retry once the disk is well (space freed, or the device checked)", err, what)
		return
	}
	for _, a := range errorAnswers {
		if errors.Is(err, a.err) {
			body := apiError{Error: err.Error(), Parameter: a.param, Reason: a.reason}
			var below *versionBelowError
			if errors.As(err, &below) {
				body.PolicyVersion = &below.current
			}
			writeJSON(w, a.code, body)
			return
		}
	}
	h.logf("%v", err)
	failReason(w, http.StatusInternalServerError, client.ReasonInternal, "%v", err)
}

// bearerToken is the token of an Authorization header of the Bearer
// scheme, whose name is matched without regard to case (RFC 7235).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// auth answers 401 to a request without the bearer token, comparing in
// constant time.
func (h *handler) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.token != "" {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			// Digests of equal length: the comparison tells nothing of
			// the token's length either.
			gd, wd := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(h.token))
			if !ok || subtle.ConstantTimeCompare(gd[:], wd[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="trajflow"`)
				fail(w, http.StatusUnauthorized, "Authorization", "a bearer token is required (Authorization: Bearer TOKEN, the value of serve.token_env)")
				return
			}
		}
		next(w, r)
	}
}

// MaxWorld bounds world=W.
const MaxWorld = 1024

// next answers GET /v1/steps/next: a step of K groups, leased to the
// caller (docs/serve.md).
func (h *handler) next(w http.ResponseWriter, r *http.Request) {
	q, perr := ParseStepQuery(r.URL.Query(), h.s.maxK)
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return
	}
	wt := h.s.led.wait(q.Groups, q.Rank, q.World)
	var g grant
	select {
	case g = <-wt.ch:
	case <-r.Context().Done():
		h.s.led.cancel(wt)
		return
	case <-h.s.ctx.Done():
		h.s.led.cancel(wt)
		h.failWith(w, errStopping)
		return
	}
	if g.err != nil {
		h.failWith(w, g.err)
		return
	}
	st := g.step
	if st != nil {
		// A step made before: its new lease is recorded before the answer.
		var err error
		if st, err = h.s.led.recordLease(g, q.World); err != nil {
			h.s.led.unlease(g)
			if _, ok := diskFault(err); ok {
				h.failWith(w, err) // a 503 with Retry-After
				return
			}
			h.logf("%v", err)
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "%v", err)
			return
		}
	} else {
		var err error
		if st, err = h.s.makeStep(r.Context(), g.fresh, q.Rank, q.World); err != nil {
			if _, ok := diskFault(err); ok {
				// Nothing was made: the groups are queued again.
				h.failWith(w, fmt.Errorf("making a step: %w", err))
				return
			}
			h.logf("making a step: %v", err)
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "making the step failed: %v", err)
			return
		}
		// The step's first answer is made from the records its file is
		// being written from, not read back from the file. The answer
		// ends when the handler returns: the write is waited for apart.
		n := st.Step
		defer func() {
			for _, gr := range g.fresh {
				gr.release()
			}
			go func() {
				if err := h.s.written(h.s.ctx, n); err != nil && h.s.ctx.Err() == nil {
					h.logf("%v; the service writes it again from %s at its next start", err, schema.DataDir)
				}
			}()
		}()
	}
	vs := make([]string, len(st.Versions))
	for i, v := range st.Versions {
		vs[i] = strconv.FormatInt(v, 10)
	}
	hd := w.Header()
	hd.Set(HeaderStep, strconv.FormatInt(st.Step, 10))
	hd.Set(HeaderVersions, strings.Join(vs, ","))
	groups, rows := len(st.Groups), st.Rows
	keep := stepKeep(st, q.Rank, q.World) // nil: the whole step
	fresh := g.fresh
	if st.World > 0 && q.World > 0 {
		rows = 0
		slice := partition(st.GroupTokens, st.World)[q.Rank]
		for _, i := range slice {
			rows += st.GroupRows[i]
		}
		groups = len(slice)
		fresh = slices.DeleteFunc(slices.Clone(fresh), func(gr *group) bool { return !keep[gr.ref] })
		hd.Set(HeaderRank, strconv.Itoa(q.Rank))
		hd.Set(HeaderWorld, strconv.Itoa(st.World))
		hd.Set(HeaderStepGroups, strconv.Itoa(len(st.Groups)))
	}
	hd.Set(HeaderGroups, strconv.Itoa(groups))
	hd.Set(HeaderRows, strconv.Itoa(rows))
	hd.Set("Content-Type", contentTypes[q.Format])
	// The step is leased whatever becomes of this answer: one that does
	// not arrive is served again when the lease runs out.
	if err := h.answerStep(r.Context(), w, st.Step, q.Format, fresh, keep); err != nil {
		h.logf("sending step %d: %v", st.Step, err)
	}
}

func (h *handler) ack(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("n")
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n <= 0 {
		fail(w, http.StatusBadRequest, "step", "step: want a positive step number (POST /v1/steps/N/ack)")
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "rank" && k != "world" {
			fail(w, http.StatusBadRequest, paramName(k), "unknown parameter: want rank and world, or none")
			return
		}
	}
	rank, world, perr := ParseRank(q)
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return
	}
	drift, ok := h.drift(w, r, n, rank, world, bodyOf(r))
	if !ok {
		return
	}
	st, err := h.s.led.ack(n, rank, world, drift)
	if err != nil {
		h.failWith(w, err)
		return
	}
	if st.Acked {
		h.s.engine.drop(n)
	}
	answer := map[string]any{"step": st.Step, "acked": st.Acked}
	if st.World > 0 {
		answer["ranks_acked"] = st.RanksAcked
		answer["world"] = st.World
	}
	if drift != nil {
		answer["drift"] = drift.View(n)
	}
	writeJSON(w, http.StatusOK, answer)
}

// readBody reads a request body of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= limit {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // read once, into its size
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	b := buf.Bytes()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "body", "the body is over %d bytes", limit)
		} else {
			fail(w, http.StatusBadRequest, "body", "reading the body: %v", err)
		}
		return nil, false
	}
	return b, true
}

// MaxBody bounds a request body.
const MaxBody = 64 << 10

func (h *handler) setPolicy(w http.ResponseWriter, r *http.Request) {
	v, perr := ParsePolicyBody(bodyOf(r))
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return
	}
	if err := h.s.led.setVersion(v); err != nil {
		h.failWith(w, err)
		return
	}
	h.s.eval.onVersion(h.s.led.version())
	writeJSON(w, http.StatusOK, map[string]any{"policy_version": h.s.led.version()})
}

func (h *handler) pause(w http.ResponseWriter, r *http.Request) {
	mode, perr := ParsePauseMode(r.URL.Query(), bodyOf(r), h.pauseMode)
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return
	}
	by, perr := ParseBy(r.URL.Query(), r.Header, r.RemoteAddr)
	if perr != nil {
		fail(w, http.StatusBadRequest, perr.Param, "%s", perr.Msg)
		return
	}
	// An evaluation running finishes on the weights it started on: the
	// pause (the trainer's move before it changes them) waits for it.
	if err := h.s.eval.wait(r.Context()); err != nil {
		h.failWith(w, err)
		return
	}
	if err := h.s.led.pause(mode, by); err != nil {
		h.failWith(w, err)
		return
	}
	h.logf("paused (%s) by %s", mode, by)
	writeJSON(w, http.StatusOK, map[string]any{"paused": true, "mode": mode, "by": by, "policy_version": h.s.led.version()})
}

// MaxBy bounds the length of a pause's by.
const MaxBy = 200

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	if err := h.s.led.resume(); err != nil {
		h.failWith(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": false, "policy_version": h.s.led.version()})
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.s.status())
}
