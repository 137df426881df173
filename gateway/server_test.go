package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// start starts a gateway for a test, closed at its end.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	srv := New(opts)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return srv
}

// echoModel answers every call with fixed text, counting calls.
type echoModel struct{ n atomic.Int64 }

func (m *echoModel) Call(ctx context.Context, c *Call) (*Answer, error) {
	m.n.Add(1)
	return &Answer{Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: "fine"}, FinishReason: "stop"}, nil
}

type request struct {
	method, url, body string
	header            map[string]string
}

func do(t *testing.T, r request) (int, []byte, http.Header) {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	req, err := http.NewRequest(r.method, r.url, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
func xKey(key string) map[string]string   { return map[string]string{"x-api-key": key} }

const (
	goodChat      = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	goodResponses = `{"model":"m","input":"hi"}`
	goodMessages  = `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
)

// TestMalformedCalls sends every kind of call the gateway must refuse
// to one session, checks each status and error shape, then that the
// session still answers and that another session did not move.
func TestMalformedCalls(t *testing.T) {
	srv := start(t, Options{Model: "policy", MaxBody: 4096})
	model := &echoModel{}
	s := srv.Open(model)
	defer s.End()
	other := &echoModel{}
	o := srv.Open(other)
	defer o.End()
	ended := srv.Open(&echoModel{})
	ended.End()

	chat := s.OpenAIBaseURL + "/chat/completions"
	resp := s.OpenAIBaseURL + "/responses"
	msgs := s.AnthropicBaseURL + "/v1/messages"
	unknown := "http://" + srv.Addr() + "/s/0123456789abcdef0123456789abcdef"
	big := `{"model":"m","input":"` + strings.Repeat("x", 5000) + `"}`
	bigMsgs := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	anth := func(body string) request { return request{url: msgs, body: body, header: xKey(s.Key)} }
	oa := func(url, body string) request { return request{url: url, body: body, header: bearer(s.Key)} }
	chatWith := func(fields string) request {
		return oa(chat, `{"model":"m",`+fields+`,"messages":[{"role":"user","content":"hi"}]}`)
	}

	cases := []struct {
		name      string
		req       request
		status    int
		anthropic bool
		errType   string
		param     string // OpenAI's param ("" = null)
	}{
		{"chat wrong key", request{url: chat, body: goodChat, header: bearer("tf-wrong")}, 401, false, "authentication_error", ""},
		{"chat no key", request{url: chat, body: goodChat}, 401, false, "authentication_error", ""},
		{"messages wrong key", request{url: msgs, body: goodMessages, header: xKey("tf-wrong")}, 401, true, "authentication_error", ""},
		{"chat other session's key", request{url: chat, body: goodChat, header: bearer(o.Key)}, 401, false, "authentication_error", ""},
		{"chat unknown session", request{url: unknown + "/v1/chat/completions", body: goodChat, header: bearer(s.Key)}, 404, false, "not_found_error", ""},
		{"messages unknown session", request{url: unknown + "/v1/messages", body: goodMessages, header: xKey(s.Key)}, 404, true, "not_found_error", ""},
		{"responses ended session", request{url: ended.OpenAIBaseURL + "/responses", body: goodResponses, header: bearer(ended.Key)}, 404, false, "not_found_error", ""},
		{"unknown route", oa(s.OpenAIBaseURL+"/embeddings", `{}`), 404, false, "not_found_error", ""},
		{"chat invalid JSON", oa(chat, `{"model":`), 400, false, "invalid_request_error", ""},
		{"messages invalid JSON", anth(`[1,2`), 400, true, "invalid_request_error", ""},
		{"responses body over MaxBody", oa(resp, big), 413, false, "invalid_request_error", ""},
		{"messages body over MaxBody", anth(bigMsgs), 413, true, "request_too_large", ""},
		{"chat GET", request{method: "GET", url: chat, header: bearer(s.Key)}, 405, false, "invalid_request_error", ""},
		{"messages GET", request{method: "GET", url: msgs, header: xKey(s.Key)}, 405, true, "invalid_request_error", ""},
		{"models POST", oa(s.OpenAIBaseURL+"/models", `{}`), 405, false, "invalid_request_error", ""},
		{"chat n 2", chatWith(`"n":2`), 400, false, "invalid_request_error", "n"},
		{"chat logit_bias", chatWith(`"logit_bias":{"50256":-100}`), 400, false, "invalid_request_error", "logit_bias"},
		{"chat logprobs", chatWith(`"logprobs":true`), 400, false, "invalid_request_error", "logprobs"},
		{"chat top_logprobs", chatWith(`"top_logprobs":3`), 400, false, "invalid_request_error", "top_logprobs"},
		{"chat audio", chatWith(`"audio":{"voice":"alloy","format":"wav"}`), 400, false, "invalid_request_error", "audio"},
		{"chat modalities audio", chatWith(`"modalities":["text","audio"]`), 400, false, "invalid_request_error", "modalities"},
		{"chat response_format unknown", chatWith(`"response_format":{"type":"grammar"}`), 400, false, "invalid_request_error", "response_format.type"},
		{"responses previous_response_id", oa(resp, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`), 400, false, "invalid_request_error", "previous_response_id"},
		{"responses background", oa(resp, `{"model":"m","input":"hi","background":true}`), 400, false, "invalid_request_error", "background"},
		{"responses web_search tool", oa(resp, `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`), 400, false, "invalid_request_error", "tools[0].type"},
		{"chat custom tool", chatWith(`"tools":[{"type":"custom","custom":{"name":"x"}}]`), 400, false, "invalid_request_error", "tools[0].type"},
		{"messages server tool", anth(`{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"chat tool result unknown id", oa(chat, `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"x","content":"1"}]}`), 400, false, "invalid_request_error", "messages[1].tool_call_id"},
		{"responses output unknown id", oa(resp, `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"x","output":"1"}]}`), 400, false, "invalid_request_error", "input[1].call_id"},
		{"messages tool_result unknown id", anth(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"1"}]}]}`), 400, true, "invalid_request_error", ""},
		{"chat empty messages", oa(chat, `{"model":"m","messages":[]}`), 400, false, "invalid_request_error", "messages"},
		{"responses empty input", oa(resp, `{"model":"m","input":[]}`), 400, false, "invalid_request_error", "input"},
		{"messages empty messages", anth(`{"model":"m","max_tokens":5,"messages":[]}`), 400, true, "invalid_request_error", ""},
		{"chat unknown role", oa(chat, `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`), 400, false, "invalid_request_error", "messages[0].role"},
		{"messages system role", anth(`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"chat missing model", oa(chat, `{"messages":[{"role":"user","content":"hi"}]}`), 400, false, "invalid_request_error", "model"},
		{"messages missing model", anth(`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"messages missing max_tokens", anth(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"messages max_tokens 0", anth(`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"messages max_tokens 1.5", anth(`{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"chat max_tokens -1", chatWith(`"max_tokens":-1`), 400, false, "invalid_request_error", "max_tokens"},
		{"responses max_output_tokens string", oa(resp, `{"model":"m","input":"hi","max_output_tokens":"10"}`), 400, false, "invalid_request_error", "max_output_tokens"},
		{"chat image", oa(chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`), 400, false, "invalid_request_error", "messages[0].content[0]"},
		{"responses image", oa(resp, `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}`), 400, false, "invalid_request_error", "input[0].content[0]"},
		{"messages image", anth(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`), 400, true, "invalid_request_error", ""},
		{"messages thinking", anth(`{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`), 400, true, "invalid_request_error", ""},
		{"reward bad body", oa(s.RewardURL, `{"reward":"high"}`), 400, false, "invalid_request_error", ""},
		{"reward missing", oa(s.RewardURL, `{}`), 400, false, "invalid_request_error", "reward"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := do(t, tc.req)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if strings.Contains(string(body), s.Key) || strings.Contains(string(body), o.Key) {
				t.Fatalf("a key is echoed: %s", body)
			}
			if tc.anthropic {
				var e struct {
					Type  string `json:"type"`
					Error struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != tc.errType || e.Error.Message == "" {
					t.Fatalf("not Anthropic's error shape with type %s: %s", tc.errType, body)
				}
				return
			}
			var e struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
				t.Fatalf("not OpenAI's error shape: %s", body)
			}
			var wantParam any
			if tc.param != "" {
				wantParam = tc.param
			}
			if e.Error["type"] != tc.errType || e.Error["message"] == "" || e.Error["param"] != wantParam || e.Error["code"] != nil {
				t.Fatalf("error %v; want type %s param %v", e.Error, tc.errType, wantParam)
			}
			if _, ok := e.Error["code"]; !ok {
				t.Fatalf("error lacks code: %s", body)
			}
			if tc.param != "" && !strings.HasPrefix(e.Error["message"].(string), tc.param+": ") {
				t.Errorf("message %q does not name %s", e.Error["message"], tc.param)
			}
		})
	}

	if n := model.n.Load(); n != 0 {
		t.Errorf("the model was called %d times by refused calls", n)
	}
	for _, good := range []request{oa(chat, goodChat), oa(resp, goodResponses), anth(goodMessages), {method: "GET", url: s.OpenAIBaseURL + "/models", header: bearer(s.Key)}} {
		if status, body, _ := do(t, good); status != 200 {
			t.Errorf("good call %s after the refusals: %d %s", good.url, status, body)
		}
	}
	if s.Calls() != 3 {
		t.Errorf("session's Calls() = %d, want 3", s.Calls())
	}
	if other.n.Load() != 0 || o.Calls() != 0 {
		t.Errorf("the other session moved: model %d, Calls %d", other.n.Load(), o.Calls())
	}
	if _, ok := o.Reward(); ok {
		t.Error("the other session has a reward")
	}
	st := srv.Stats()
	if st.Refused != int64(len(cases)) || st.Calls != 3 || st.Errors != 0 || st.SessionsOpened != 3 || st.SessionsOpen != 2 {
		t.Errorf("stats %+v", st)
	}
	if st.ByAPI[AgentChat] != 1 || st.ByAPI[AgentResponses] != 1 || st.ByAPI[AgentMessages] != 1 || st.AddedLatency.Count != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestReward(t *testing.T) {
	srv := start(t, Options{})
	s := srv.Open(&echoModel{})
	defer s.End()
	if _, ok := s.Reward(); ok {
		t.Fatal("a reward before any was posted")
	}
	for _, r := range []string{`{"reward":0.5}`, `{"reward":1}`} {
		status, body, _ := do(t, request{url: s.RewardURL, body: r, header: bearer(s.Key)})
		if status != 200 || string(body) != `{"ok":true}` {
			t.Fatalf("%d %s", status, body)
		}
	}
	if r, ok := s.Reward(); !ok || r != 1 {
		t.Errorf("reward %v %v; want the last one, 1", r, ok)
	}
	if s.Calls() != 0 {
		t.Errorf("a reward counted as a call")
	}
}

func TestModels(t *testing.T) {
	srv := start(t, Options{Model: "policy"})
	s := srv.Open(&echoModel{})
	defer s.End()
	status, body, _ := do(t, request{method: "GET", url: s.OpenAIBaseURL + "/models", header: bearer(s.Key)})
	if status != 200 || !jsonEqual(t, body, `{"object":"list","data":[{"id":"policy","object":"model","created":0,"owned_by":"trajflow"}]}`) {
		t.Errorf("%d %s", status, body)
	}
	status, body, _ = do(t, request{method: "GET", url: s.OpenAIBaseURL + "/models/policy", header: xKey(s.Key)})
	if status != 200 || !jsonEqual(t, body, `{"id":"policy","object":"model","created":0,"owned_by":"trajflow"}`) {
		t.Errorf("%d %s", status, body)
	}
	if status, _, _ = do(t, request{method: "GET", url: s.OpenAIBaseURL + "/models/other", header: bearer(s.Key)}); status != 404 {
		t.Errorf("unknown model: %d", status)
	}
}

func TestModelErrors(t *testing.T) {
	srv := start(t, Options{})
	cases := []struct {
		err            error
		status         int
		openai, anthro string
	}{
		{&CallError{Status: 503, Message: "busy"}, 503, "server_error", "overloaded_error"},
		{&CallError{Status: 400, Message: "prompt too long"}, 400, "invalid_request_error", "invalid_request_error"},
		{errors.New("engine down"), 502, "server_error", "api_error"},
	}
	for _, tc := range cases {
		m := ModelFunc(func(ctx context.Context, c *Call) (*Answer, error) { return nil, tc.err })
		s := srv.Open(m)
		status, body, _ := do(t, request{url: s.OpenAIBaseURL + "/chat/completions", body: goodChat, header: bearer(s.Key)})
		var oe struct{ Error map[string]any }
		if json.Unmarshal(body, &oe); status != tc.status || oe.Error["type"] != tc.openai {
			t.Errorf("%v: chat %d %s", tc.err, status, body)
		}
		if strings.Contains(string(body), "engine down") {
			t.Errorf("an internal error reached the agent: %s", body)
		}
		status, body, _ = do(t, request{url: s.AnthropicBaseURL + "/v1/messages", body: goodMessages, header: xKey(s.Key)})
		var ae struct{ Error map[string]any }
		if json.Unmarshal(body, &ae); status != tc.status || ae.Error["type"] != tc.anthro {
			t.Errorf("%v: messages %d %s", tc.err, status, body)
		}
		if s.Calls() != 0 {
			t.Errorf("a failed call counted as answered")
		}
		s.End()
	}
	if st := srv.Stats(); st.Errors != 6 || st.Calls != 6 {
		t.Errorf("stats %+v", st)
	}
}

// TestEnd: a call in flight completes, End waits for it without
// cancelling its context, later calls are 404, End again returns.
func TestEnd(t *testing.T) {
	srv := start(t, Options{})
	entered, release := make(chan struct{}), make(chan struct{})
	var cancelled atomic.Bool
	m := ModelFunc(func(ctx context.Context, c *Call) (*Answer, error) {
		close(entered)
		<-release
		cancelled.Store(ctx.Err() != nil)
		return &Answer{Message: pipeline.Message{Role: "assistant", Content: "done"}}, nil
	})
	s := srv.Open(m)
	got := make(chan int, 1)
	go func() {
		status, _, _ := do(t, request{url: s.OpenAIBaseURL + "/chat/completions", body: goodChat, header: bearer(s.Key)})
		got <- status
	}()
	<-entered
	endDone := make(chan struct{})
	go func() { s.End(); close(endDone) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-endDone:
		t.Fatal("End returned while a call was in flight")
	default:
	}
	// The session refuses new calls already.
	if status, _, _ := do(t, request{url: s.OpenAIBaseURL + "/chat/completions", body: goodChat, header: bearer(s.Key)}); status != 404 {
		t.Errorf("a call after End: %d, want 404", status)
	}
	close(release)
	<-endDone
	if status := <-got; status != 200 {
		t.Errorf("the call in flight: %d", status)
	}
	if cancelled.Load() {
		t.Error("End cancelled the call's context")
	}
	if s.Calls() != 1 {
		t.Errorf("Calls() = %d", s.Calls())
	}
	s.End()
	if st := srv.Stats(); st.SessionsOpen != 0 || st.SessionsOpened != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestCloseCancels: Close waits for calls in flight until its ctx ends,
// then cancels their contexts.
func TestCloseCancels(t *testing.T) {
	srv := New(Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	s := srv.Open(ModelFunc(func(ctx context.Context, c *Call) (*Answer, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	go func() {
		req, _ := http.NewRequest("POST", s.OpenAIBaseURL+"/chat/completions", strings.NewReader(goodChat))
		req.Header.Set("Authorization", "Bearer "+s.Key)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v; want a deadline", err)
	}
	s.End() // returns: the call ended
	if later := srv.Open(&echoModel{}); later.Calls() != 0 {
		t.Error("a session opened after Close has calls")
	}
}

// sseEvents reads an SSE body into its events (name, data).
func sseEvents(t *testing.T, body []byte) [][2]string {
	t.Helper()
	var out [][2]string
	var name string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, [2]string{name, strings.TrimPrefix(line, "data: ")})
			name = ""
		case line == "":
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	return out
}

var streamAnswer = &Answer{
	Message: pipeline.Message{Role: "assistant", Content: "Let me work this out with the calculator: ünïcödé 日本語.", ToolCalls: []pipeline.ToolCall{
		{ID: "call_a", Name: "calculator", Arguments: `{"expression":"17 * 3 + (4 / 2) - 1"}`},
		{ID: "call_b", Name: "calculator", Arguments: `{"expression":"2*2"}`},
	}},
	FinishReason: "tool_calls", PromptTokens: 11, CompletionTokens: 22,
}

func streamSession(t *testing.T) envs.Session {
	srv := start(t, Options{})
	s := srv.Open(ModelFunc(func(ctx context.Context, c *Call) (*Answer, error) {
		if !c.Stream {
			t.Error("Call.Stream is false")
		}
		return streamAnswer, nil
	}))
	t.Cleanup(s.End)
	return s
}

func TestStreamChat(t *testing.T) {
	s := streamSession(t)
	status, body, h := do(t, request{url: s.OpenAIBaseURL + "/chat/completions", header: bearer(s.Key),
		body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`})
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", status, body)
	}
	evs := sseEvents(t, body)
	if evs[len(evs)-1][1] != "[DONE]" {
		t.Fatalf("no [DONE] at the end")
	}
	var text string
	var finish string
	var usage map[string]any
	args := map[int]string{}
	idOf := map[int]string{}
	deltas := 0
	for _, ev := range evs[:len(evs)-1] {
		var c struct {
			Object  string
			Choices []struct {
				Delta struct {
					Content   *string
					ToolCalls []struct {
						Index    int
						ID       string
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
			}
			Usage map[string]any
		}
		if err := json.Unmarshal([]byte(ev[1]), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("bad chunk %s", ev[1])
		}
		if len(c.Choices) == 0 {
			usage = c.Usage
			continue
		}
		d := c.Choices[0].Delta
		if d.Content != nil {
			text += *d.Content
			deltas++
		}
		for _, tc := range d.ToolCalls {
			args[tc.Index] += tc.Function.Arguments
			if tc.ID != "" {
				idOf[tc.Index] = tc.ID
			}
		}
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if text != streamAnswer.Message.Content || deltas < 2 {
		t.Errorf("text %q in %d deltas", text, deltas)
	}
	for i, tc := range streamAnswer.Message.ToolCalls {
		if args[i] != tc.Arguments || idOf[i] != tc.ID {
			t.Errorf("tool call %d: %q %q", i, idOf[i], args[i])
		}
	}
	if finish != "tool_calls" || usage["total_tokens"] != float64(33) {
		t.Errorf("finish %q usage %v", finish, usage)
	}
}

func TestStreamResponses(t *testing.T) {
	s := streamSession(t)
	status, body, _ := do(t, request{url: s.OpenAIBaseURL + "/responses", header: bearer(s.Key), body: `{"model":"m","stream":true,"input":"hi"}`})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var text string
	args := map[string]string{}
	var final map[string]any
	var names []string
	for i, ev := range sseEvents(t, body) {
		var e map[string]any
		if err := json.Unmarshal([]byte(ev[1]), &e); err != nil {
			t.Fatal(err)
		}
		if e["type"] != ev[0] || e["sequence_number"] != float64(i) {
			t.Fatalf("event %d: %s named %q", i, ev[1], ev[0])
		}
		names = append(names, ev[0])
		switch ev[0] {
		case "response.output_text.delta":
			text += e["delta"].(string)
		case "response.function_call_arguments.delta":
			args[e["item_id"].(string)] += e["delta"].(string)
		case "response.function_call_arguments.done":
			if args[e["item_id"].(string)] != e["arguments"] {
				t.Errorf("arguments done %v, deltas %q", e["arguments"], args[e["item_id"].(string)])
			}
		case "response.completed":
			final = e["response"].(map[string]any)
		}
	}
	if names[0] != "response.created" || names[1] != "response.in_progress" || names[len(names)-1] != "response.completed" {
		t.Errorf("events %v", names)
	}
	if text != streamAnswer.Message.Content {
		t.Errorf("text %q", text)
	}
	out := final["output"].([]any)
	if len(out) != 3 {
		t.Fatalf("output %v", out)
	}
	for i, tc := range streamAnswer.Message.ToolCalls {
		it := out[i+1].(map[string]any)
		if it["call_id"] != tc.ID || it["arguments"] != tc.Arguments || args[it["id"].(string)] != tc.Arguments {
			t.Errorf("item %v", it)
		}
	}
}

func TestStreamMessages(t *testing.T) {
	s := streamSession(t)
	status, body, _ := do(t, request{url: s.AnthropicBaseURL + "/v1/messages", header: xKey(s.Key), body: `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`})
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	blocks := map[int]map[string]any{}
	partial := map[int]string{}
	var names []string
	var stop any
	for _, ev := range sseEvents(t, body) {
		var e map[string]any
		if err := json.Unmarshal([]byte(ev[1]), &e); err != nil || e["type"] != ev[0] {
			t.Fatalf("event %q: %s", ev[0], ev[1])
		}
		names = append(names, ev[0])
		idx, _ := e["index"].(float64)
		switch ev[0] {
		case "content_block_start":
			blocks[int(idx)] = e["content_block"].(map[string]any)
		case "content_block_delta":
			d := e["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				partial[int(idx)] += d["text"].(string)
			case "input_json_delta":
				partial[int(idx)] += d["partial_json"].(string)
			}
		case "message_delta":
			stop = e["delta"].(map[string]any)["stop_reason"]
		}
	}
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" || stop != "tool_use" {
		t.Errorf("events %v stop %v", names, stop)
	}
	if blocks[0]["type"] != "text" || partial[0] != streamAnswer.Message.Content {
		t.Errorf("text block %v %q", blocks[0], partial[0])
	}
	for i, tc := range streamAnswer.Message.ToolCalls {
		if blocks[i+1]["id"] != tc.ID || !jsonEqual(t, partial[i+1], tc.Arguments) {
			t.Errorf("tool_use %d: %v %q", i, blocks[i+1], partial[i+1])
		}
	}
}

// TestHangUp: a call whose agent hangs up has its Model context ended
// and gets no answer; the session goes on.
func TestHangUp(t *testing.T) {
	srv := start(t, Options{})
	sawCancel := make(chan bool, 1)
	s := srv.Open(ModelFunc(func(ctx context.Context, c *Call) (*Answer, error) {
		if c.Messages[0].Content == "wait" {
			select {
			case <-ctx.Done():
				sawCancel <- true
				return nil, ctx.Err()
			case <-time.After(5 * time.Second):
				sawCancel <- false
			}
		}
		return &Answer{Message: pipeline.Message{Role: "assistant", Content: "ok"}}, nil
	}))
	defer s.End()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.OpenAIBaseURL+"/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"wait"}]}`))
	req.Header.Set("Authorization", "Bearer "+s.Key)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatal("the call was answered")
	}
	if !<-sawCancel {
		t.Fatal("the Model's context did not end when the agent hung up")
	}
	if status, body, _ := do(t, request{url: s.OpenAIBaseURL + "/chat/completions", body: goodChat, header: bearer(s.Key)}); status != 200 {
		t.Fatalf("the next call: %d %s", status, body)
	}
}

// TestConcurrentSessions: sessions called at once keep their own
// counts.
func TestConcurrentSessions(t *testing.T) {
	srv := start(t, Options{})
	const sessions, calls = 8, 6
	var wg sync.WaitGroup
	got := make([]int, sessions)
	for i := range sessions {
		m := &echoModel{}
		s := srv.Open(m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.End()
			for j := range calls {
				url, body, h := s.OpenAIBaseURL+"/chat/completions", goodChat, bearer(s.Key)
				if j%2 == 1 {
					url, body, h = s.AnthropicBaseURL+"/v1/messages", goodMessages, xKey(s.Key)
				}
				if status, b, _ := do(t, request{url: url, body: body, header: h}); status != 200 {
					t.Errorf("session %d call %d: %d %s", i, j, status, b)
				}
			}
			got[i] = s.Calls()
		}()
	}
	wg.Wait()
	for i, n := range got {
		if n != calls {
			t.Errorf("session %d: %d calls", i, n)
		}
	}
	st := srv.Stats()
	if st.Calls != sessions*calls || st.ByAPI[AgentChat] != sessions*calls/2 || st.SessionsOpen != 0 || st.AddedLatency.Count != sessions*calls {
		t.Errorf("stats %+v", st)
	}
	if st.AddedLatency.P50 <= 0 || st.AddedLatency.P99 < st.AddedLatency.P50 || st.AddedLatency.Mean <= 0 {
		t.Errorf("latency %+v", st.AddedLatency)
	}
}

func TestNoSessionInPath(t *testing.T) {
	srv := start(t, Options{})
	status, body, _ := do(t, request{url: "http://" + srv.Addr() + "/v1/chat/completions", body: goodChat})
	if status != 404 || !strings.Contains(string(body), "/s/") {
		t.Errorf("%d %s", status, body)
	}
}

// A connection an agent opened and never sent a request on (an HTTP
// client's spare) holds no call: Close ends without waiting for it and
// without an error. Shutdown alone counts it busy for 5 s, past this
// test's 3 s.
func TestCloseWithAnUnusedConnection(t *testing.T) {
	srv := New(Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
