package httpenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/wire"
	"github.com/trajflow/trajflow/pipeline"
)

func rollout(traj string, fields map[string]any) *pipeline.Rollout {
	raw, _ := json.Marshal(fields)
	return &pipeline.Rollout{
		TrajID: traj, Seed: 42, Model: "m",
		Task:     &pipeline.Task{Index: 3, Source: "tasks.jsonl:4", Raw: raw, Fields: fields},
		Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "question?"}},
	}
}

func newEnv(t *testing.T, c Config) *Env {
	t.Helper()
	if c.Backoff == 0 {
		c.Backoff = pipeline.Duration(time.Millisecond)
	}
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// act appends an assistant message to r and steps.
func act(ctx context.Context, e envs.Env, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	action.Role = pipeline.RoleAssistant
	action.Turn = r.NumTurns + 1
	r.NumTurns++
	r.Messages = append(r.Messages, action)
	st, err := e.Step(ctx, r, action)
	if err != nil {
		return nil, err
	}
	for _, o := range st.Observations {
		o.Turn = action.Turn
		r.Messages = append(r.Messages, o)
	}
	r.State = st.State
	return st, nil
}

func decodeBody(t *testing.T, r *http.Request, v any) {
	t.Helper()
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		t.Errorf("%s: bad request body: %v", r.URL.Path, err)
	}
}

func TestResetStep(t *testing.T) {
	var seen struct {
		sync.Mutex
		auth []string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Lock()
		seen.auth = append(seen.auth, r.Header.Get("Authorization"))
		seen.Unlock()
		switch r.URL.Path {
		case "/reset":
			var req wire.ResetRequest
			decodeBody(t, r, &req)
			if req.TrajID != "t1" || req.Seed != 42 || !strings.Contains(string(req.Task), `"word":"kiwi"`) || len(req.Messages) != 1 {
				t.Errorf("reset request = %+v", req)
			}
			fmt.Fprintf(w, `{"observations":[{"role":"user","content":"guess"}],"tools":[{"type":"function"}],"state":{"left":2,"traj":%q}}`, req.TrajID)
		case "/step":
			var req wire.StepRequest
			decodeBody(t, r, &req)
			var st struct {
				Left int
				Traj string
			}
			json.Unmarshal(req.State, &st)
			if req.Action.Content == "fail" {
				fmt.Fprint(w, `{"error":"cannot step"}`)
				return
			}
			if req.Messages[len(req.Messages)-1].Content != req.Action.Content {
				t.Errorf("messages do not end with the action: %+v", req.Messages)
			}
			st.Left--
			fmt.Fprintf(w, `{"observations":[{"content":"left %d"}],"reward":0.5,"terminated":%v,"metrics":{"acc":1},"stop":["END"],"state":{"left":%d,"traj":%q},"is_action_valid":%v,"anchor":"left %d"}`,
				st.Left, st.Left == 0, st.Left, st.Traj, req.Action.Content != "b", st.Left)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	e := newEnv(t, Config{URL: srv.URL + "/", Headers: map[string]string{"Authorization": "Bearer x"}})
	r := rollout("t1", map[string]any{"word": "kiwi"})
	rs, err := e.Reset(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Observations) != 1 || rs.Observations[0].Content != "guess" || len(rs.Tools) != 1 {
		t.Fatalf("reset = %+v", rs)
	}
	r.State = rs.State
	st, err := act(context.Background(), e, r, pipeline.Message{Content: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Terminated || st.Reward != 0.5 || st.Metrics["acc"] != 1 || st.StopStrings[0] != "END" || st.Observations[0].Role != "user" {
		t.Fatalf("step 1 = %+v", st)
	}
	if st.InvalidAction || !st.ReportsValidity || st.Anchor == nil || *st.Anchor != "left 1" {
		t.Fatalf("step 1: invalid %v reports %v anchor %v", st.InvalidAction, st.ReportsValidity, st.Anchor)
	}
	st, err = act(context.Background(), e, r, pipeline.Message{Content: "b"})
	if err != nil || !st.Terminated || string(st.State.(json.RawMessage)) != `{"left":0,"traj":"t1"}` {
		t.Fatalf("step 2 = %+v, %v", st, err)
	}
	if !st.InvalidAction || st.Anchor == nil || *st.Anchor != "left 0" {
		t.Fatalf("step 2: invalid %v anchor %v, want is_action_valid false read", st.InvalidAction, st.Anchor)
	}
	_, err = act(context.Background(), e, r, pipeline.Message{Content: "fail"})
	if !errors.Is(err, wire.ErrEnv) || !strings.Contains(err.Error(), "cannot step") || !strings.Contains(err.Error(), srv.URL+"/step") {
		t.Fatalf("env error = %v", err)
	}
	for _, a := range seen.auth {
		if a != "Bearer x" {
			t.Fatalf("header not sent: %q", a)
		}
	}
}

func TestRetries(t *testing.T) {
	cases := []struct {
		name      string
		failures  int // answers with status before a good one
		status    int
		attempts  int
		wantCalls int32
		wantErr   string
	}{
		{"5xx then ok", 2, 503, 3, 3, ""},
		{"5xx bounded", 10, 500, 3, 3, "HTTP 500"},
		{"429 retried", 1, 429, 3, 2, ""},
		{"no retry", 10, 502, 1, 1, "after 1 attempts"},
		{"4xx not retried", 10, 400, 3, 1, "HTTP 400"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if int(calls.Add(1)) <= c.failures {
					http.Error(w, "busy", c.status)
					return
				}
				fmt.Fprint(w, `{"state":1}`)
			}))
			defer srv.Close()
			e := newEnv(t, Config{URL: srv.URL, MaxAttempts: c.attempts})
			_, err := e.Reset(context.Background(), rollout("t", nil))
			if got := calls.Load(); got != c.wantCalls {
				t.Errorf("%d calls, want %d", got, c.wantCalls)
			}
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), srv.URL+"/reset") {
				t.Fatalf("error %v, want %q naming the URL", err, c.wantErr)
			}
		})
	}
}

func TestServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := newEnv(t, Config{URL: "http://" + addr, MaxAttempts: 2})
	_, err = e.Reset(context.Background(), rollout("t", nil))
	if err == nil || !strings.Contains(err.Error(), "http://"+addr+"/reset") || !strings.Contains(err.Error(), "after 2 attempts") {
		t.Fatalf("err = %v", err)
	}
}

func TestRequestTimeoutAndContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	e := newEnv(t, Config{URL: srv.URL, MaxAttempts: 2, RequestTimeout: pipeline.Duration(20 * time.Millisecond)})
	_, err := e.Reset(context.Background(), rollout("t", nil))
	if err == nil || !strings.Contains(err.Error(), "no answer within request_timeout 20ms") {
		t.Fatalf("err = %v", err)
	}
	e = newEnv(t, Config{URL: srv.URL, MaxAttempts: 5, RequestTimeout: pipeline.Duration(time.Minute)})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = e.Reset(ctx, rollout("t", nil))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestBadResponses(t *testing.T) {
	for _, body := range []string{`not json`, `{"observations": 3}`, `{"unknown": 1}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
		e := newEnv(t, Config{URL: srv.URL})
		_, err := e.Reset(context.Background(), rollout("t", nil))
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "bad response") {
			t.Errorf("body %s: err = %v", body, err)
		}
	}
}

func TestConfig(t *testing.T) {
	cases := []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{}, "env.url: required"},
		{map[string]any{"url": "ftp://x"}, "env.url"},
		{map[string]any{"url": "http://x", "protocol": "grpc"}, "env.protocol"},
		{map[string]any{"url": "http://x", "max_attempts": -2}, "env.max_attempts"},
		{map[string]any{"url": "http://x", "timeout": "1s"}, "timeout"},
	}
	for _, c := range cases {
		_, err := envs.New(Name, envs.Options{Section: "env", Values: c.vals})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.vals, err, c.want)
		}
	}
	e, err := envs.New(Name, envs.Options{Section: "env", Values: map[string]any{
		"url": "http://127.0.0.1:1", "protocol": "nemo_gym", "request_timeout": "5s", "max_attempts": 2,
		"backoff": "10ms", "headers": map[string]any{"X-A": "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := e.(*Env).cfg
	if c.Protocol != ProtocolNeMoGym || c.RequestTimeout.D() != 5*time.Second || c.MaxAttempts != 2 || c.Headers["X-A"] != "b" {
		t.Fatalf("cfg = %+v", c)
	}
}

// gymServer is a small NeMo Gym resources server: seed_session opens a
// session (cookie), get_counter/incr are tools over the session's counter,
// verify rewards 1 when the final answer equals the counter.
type gymServer struct {
	t        *testing.T
	mu       sync.Mutex
	next     int
	counters map[string]int
	tasks    map[string]map[string]any
	verified []map[string]any
	calls    atomic.Int32
}

func (g *gymServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.calls.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		http.Error(w, "bad json: "+string(b), http.StatusUnprocessableEntity)
		return
	}
	if r.URL.Path == "/seed_session" {
		g.next++
		id := fmt.Sprintf("s%d", g.next)
		g.counters[id] = 0
		g.tasks[id] = body
		http.SetCookie(w, &http.Cookie{Name: "session_id", Value: id})
		fmt.Fprint(w, `{}`)
		return
	}
	c, err := r.Cookie("session_id")
	if err != nil {
		http.Error(w, "no session", http.StatusBadRequest)
		return
	}
	if _, ok := g.counters[c.Value]; !ok {
		http.Error(w, "unknown session "+c.Value, http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/incr":
		by, _ := body["by"].(float64)
		g.counters[c.Value] += int(by)
		fmt.Fprintf(w, `{"session":%q,"counter":%d}`, c.Value, g.counters[c.Value])
	case "/verify":
		g.verified = append(g.verified, body)
		resp := body["response"].(map[string]any)
		out := resp["output"].([]any)
		last := out[len(out)-1].(map[string]any)
		text := last["content"].([]any)[0].(map[string]any)["text"].(string)
		reward := 0.0
		if text == fmt.Sprint(g.counters[c.Value]) && body["expected_answer"] == text {
			reward = 1
		}
		fmt.Fprintf(w, `{"reward": %v, "extra": "x"}`, reward)
	default:
		http.Error(w, "no such tool "+r.URL.Path, http.StatusNotFound)
	}
}

func TestNeMoGym(t *testing.T) {
	g := &gymServer{t: t, counters: map[string]int{}, tasks: map[string]map[string]any{}}
	srv := httptest.NewServer(g)
	defer srv.Close()
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	ctx := context.Background()
	task := map[string]any{
		"expected_answer": "5", "agent_ref": map[string]any{"name": "a"},
		"responses_create_params": map[string]any{"input": []any{map[string]any{"role": "user", "content": "count to 5"}}, "temperature": 0.5},
	}
	a, b := rollout("ta", task), rollout("tb", task)
	for _, r := range []*pipeline.Rollout{a, b} {
		rs, err := e.Reset(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.Tools) != 0 || len(rs.Observations) != 0 {
			t.Fatalf("reset = %+v", rs)
		}
		r.State = rs.State
	}
	if g.tasks["s1"]["expected_answer"] != "5" {
		t.Fatalf("seed_session body = %v", g.tasks["s1"])
	}
	call := func(r *pipeline.Rollout, id, name, args string) pipeline.Message {
		st, err := act(ctx, e, r, pipeline.Message{ToolCalls: []pipeline.ToolCall{{ID: id, Type: "function", Name: name, Arguments: args}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Observations) != 1 || st.Terminated {
			t.Fatalf("tool step = %+v", st)
		}
		return st.Observations[0]
	}
	// Interleave the two trajectories: each keeps its own session.
	if m := call(a, "c1", "incr", `{"by": 2}`); m.Content != `{"session":"s1","counter":2}` || m.ToolCallID != "c1" || m.Role != "tool" || m.Name != "incr" {
		t.Fatalf("a's tool message = %+v", m)
	}
	if m := call(b, "c2", "incr", `{"by": 5}`); m.Content != `{"session":"s2","counter":5}` {
		t.Fatalf("b's tool message = %+v", m)
	}
	if m := call(a, "c3", "incr", `{"by": 3}`); m.Content != `{"session":"s1","counter":5}` {
		t.Fatalf("a's second tool message = %+v", m)
	}
	// Tool errors the model made stay in the trajectory.
	if m := call(a, "c4", "nope", `{}`); !strings.Contains(m.Content, "no such tool /nope") {
		t.Fatalf("unknown tool = %+v", m)
	}
	before := g.calls.Load()
	if m := call(a, "c5", "incr", `{"by": `); !strings.Contains(m.Content, `{"error": "Invalid tool call arguments: JSONDecodeError(`) {
		t.Fatalf("bad arguments = %+v", m)
	}
	if m := call(a, "c6", "verify", `{}`); !strings.Contains(m.Content, "is not available") {
		t.Fatalf("reserved name = %+v", m)
	}
	if g.calls.Load() != before {
		t.Fatal("invalid tool calls reached the server")
	}
	// Final answers: a is right (5 == its counter), b is wrong.
	st, err := act(ctx, e, a, pipeline.Message{Content: "5"})
	if err != nil || !st.Terminated || st.Reward != 1 {
		t.Fatalf("a's verify = %+v, %v", st, err)
	}
	st, err = act(ctx, e, b, pipeline.Message{Content: "4"})
	if err != nil || !st.Terminated || st.Reward != 0 {
		t.Fatalf("b's verify = %+v, %v", st, err)
	}
	v := g.verified[0]
	rcp := v["responses_create_params"].(map[string]any)
	if rcp["temperature"] != 0.5 || len(rcp["input"].([]any)) != 1 || v["agent_ref"] == nil {
		t.Fatalf("verify body lost task fields: %v", v)
	}
	out := v["response"].(map[string]any)["output"].([]any)
	// a: 5 tool calls (function_call + function_call_output each) + answer.
	if len(out) != 11 {
		t.Fatalf("a's output has %d items: %v", len(out), out)
	}
	if fc := out[0].(map[string]any); fc["type"] != "function_call" || fc["call_id"] != "c1" || fc["name"] != "incr" {
		t.Fatalf("first output item = %v", fc)
	}
	if fo := out[1].(map[string]any); fo["type"] != "function_call_output" || fo["call_id"] != "c1" {
		t.Fatalf("second output item = %v", fo)
	}
	// A step without a session is refused.
	orphan := rollout("x", task)
	if _, err := e.Step(ctx, orphan, pipeline.Message{Role: "assistant", Content: "1"}); err == nil || !strings.Contains(err.Error(), "no nemo_gym session") {
		t.Fatalf("orphan step: %v", err)
	}
}

func TestNeMoGymVerifyErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{200, `{"score": 1}`, "verify answer has no numeric reward"},
		{200, `<html>`, "bad verify answer"},
		{422, `{"detail": "invalid"}`, "HTTP 422"},
		{500, `oops`, "HTTP 500"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/seed_session" {
				fmt.Fprint(w, `{}`)
				return
			}
			w.WriteHeader(c.status)
			fmt.Fprint(w, c.body)
		}))
		e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym, MaxAttempts: 2})
		r := rollout("t", map[string]any{"q": 1})
		rs, err := e.Reset(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		r.State = rs.State
		_, err = act(context.Background(), e, r, pipeline.Message{Content: "x"})
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/verify") {
			t.Errorf("%d %s: err = %v, want %q", c.status, c.body, err, c.want)
		}
	}
}

func TestSessionCookieExpiry(t *testing.T) {
	s := Session{}.merge([]*http.Cookie{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}})
	s2 := s.merge([]*http.Cookie{{Name: "a", MaxAge: -1}, {Name: "b", Value: "3"}})
	if len(s.Cookies) != 2 || s.Cookies["b"] != "2" {
		t.Fatalf("merge changed the old session: %v", s.Cookies)
	}
	if _, ok := s2.Cookies["a"]; ok || s2.Cookies["b"] != "3" {
		t.Fatalf("merged = %v", s2.Cookies)
	}
}

// An observation of role "environment" (NeMo RL's) is taken as the
// user's.
func TestEnvironmentRole(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/reset":
			fmt.Fprint(w, `{"observations":[{"role":"environment","content":"start"}]}`)
		case "/step":
			fmt.Fprint(w, `{"observations":[{"role":"environment","content":"next"}],"terminated":true}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	e := newEnv(t, Config{URL: srv.URL})
	r := rollout("t1", map[string]any{})
	rs, err := e.Reset(context.Background(), r)
	if err != nil || len(rs.Observations) != 1 || rs.Observations[0].Role != pipeline.RoleUser {
		t.Fatalf("reset %+v, %v", rs, err)
	}
	st, err := act(context.Background(), e, r, pipeline.Message{Content: "a"})
	if err != nil || len(st.Observations) != 1 || st.Observations[0].Role != pipeline.RoleUser || st.Observations[0].Content != "next" {
		t.Fatalf("step %+v, %v", st, err)
	}
}
