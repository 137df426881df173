package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// maxBody bounds a request body.
const maxBody = 32 << 20

// Handler serves the OpenAI-compatible API: POST /v1/chat/completions,
// POST /v1/completions (a text prompt, or token ids as vLLM takes them),
// vLLM's POST /tokenize and POST /detokenize, GET /v1/models, GET /health,
// GET /metrics (vLLM's counters: vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:prompt_tokens_total,
// vllm:generation_tokens_total; the generation counter includes the tokens
// of requests cancelled before they finished, as vLLM's does), and the
// Batch API (files and batches, see batchapi.go). With Options.RateLimit it
// enforces an account's rate limits as hosted APIs do.
//
// Like vLLM, responses carry prompt_token_ids (top level) and
// choices[].token_ids when the request sets return_token_ids, per-token
// logprobs when it sets logprobs, and always usage. The top-level
// sim_trailer field carries the Trailer.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handle(openAIAPI(true)))
	mux.HandleFunc("POST /v1/completions", s.handle(openAIAPI(false)))
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("POST /abort_request", s.abort)
	mux.HandleFunc("POST /generate", s.handle(nativeAPI)) // SGLang's native API (native.go)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", s.metrics)
	s.batchRoutes(mux)
	return mux
}

// metrics serves the server's counters in Prometheus' text format, under
// vLLM's names.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	st := s.Stats()
	label := strconv.Quote(s.opts.Model)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	for _, m := range []struct {
		name, typ, help string
		v               float64
	}{
		{"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(st.Running)},
		{"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(st.Queued)},
		{"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(st.PromptTokens)},
		{"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(st.DecodedTokens)},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=%s} %s\n", m.name, m.help, m.name, m.typ, m.name, label, strconv.FormatFloat(m.v, 'f', -1, 64))
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.Model, "object": "model", "created": s.start.Unix(),
			"owned_by": "trajflow", "max_model_len": s.opts.MaxModelLen,
		}},
	})
}

// wireRequest is the part of a request body the simulator reads; the rest
// goes to Params.
type wireRequest struct {
	Model    string            `json:"model"`
	Messages []wireMessage     `json:"messages"`
	Prompt   json.RawMessage   `json:"prompt"`
	Tools    []json.RawMessage `json:"tools"`
	Stream   bool              `json:"stream"`
	N        *int              `json:"n"`
	// Priority is vLLM's and SGLang's per-request scheduling priority
	// (lower first; default 0).
	Priority       *int            `json:"priority"`
	Logprobs       json.RawMessage `json:"logprobs"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Name       string          `json:"name,omitempty"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parsedRequest is a decoded request.
type parsedRequest struct {
	wire     wireRequest
	params   map[string]any
	messages []pipeline.Message
	prompt   string
	// promptIDs is a completions prompt given as token ids (nil otherwise).
	promptIDs []int32
	logprobs  bool
	priority  int
}

// decodeRequest decodes and checks a request body. Errors are client errors.
func decodeRequest(body []byte, chat bool) (*parsedRequest, error) {
	p := &parsedRequest{}
	if err := json.Unmarshal(body, &p.wire); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&p.params); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	if p.wire.Stream {
		return nil, errors.New("stream: streaming is not supported by the simulator")
	}
	if p.wire.Priority != nil {
		p.priority = *p.wire.Priority
	}
	if p.wire.N != nil && *p.wire.N != 1 {
		return nil, fmt.Errorf("n: only n=1 is supported, got %d", *p.wire.N)
	}
	switch lp := bytes.TrimSpace(p.wire.Logprobs); {
	case len(lp) == 0, string(lp) == "null", string(lp) == "false":
	case string(lp) == "true":
		p.logprobs = true
	default:
		var n int
		if err := json.Unmarshal(lp, &n); err != nil || n < 0 {
			return nil, fmt.Errorf("logprobs: want true, false or a count >= 0, got %s", lp)
		}
		p.logprobs = !chat
		if chat {
			return nil, fmt.Errorf("logprobs: want true or false, got %s", lp)
		}
	}
	if chat {
		if len(p.wire.Messages) == 0 {
			return nil, errors.New("messages: at least one message is required")
		}
		msgs, err := decodeMessages(p.wire.Messages)
		if err != nil {
			return nil, err
		}
		p.messages = msgs
		return p, nil
	}
	if ids, ok := tokenPrompt(p.wire.Prompt); ok {
		p.promptIDs = ids
		return p, nil
	}
	var prompt string
	if err := json.Unmarshal(p.wire.Prompt, &prompt); err != nil {
		var prompts []string
		if err2 := json.Unmarshal(p.wire.Prompt, &prompts); err2 != nil || len(prompts) != 1 {
			return nil, errors.New("prompt: want a string, a list of token ids, or a list of one of those")
		}
		prompt = prompts[0]
	}
	p.prompt = prompt
	return p, nil
}

// tokenPrompt reads a prompt of token ids: [1, 2, 3] or [[1, 2, 3]].
func tokenPrompt(raw json.RawMessage) ([]int32, bool) {
	var ids []int32
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return ids, true
	}
	var lists [][]int32
	if err := json.Unmarshal(raw, &lists); err == nil && len(lists) == 1 && len(lists[0]) > 0 {
		return lists[0], true
	}
	return nil, false
}

// tokenize serves vLLM's POST /tokenize: {"messages", "tools",
// "add_generation_prompt" (default true), "chat_template_kwargs"} rendered
// by the chat template (chat_template and add_special_tokens are accepted
// and change nothing: the simulator has one template and no BOS),
// or {"prompt"} as text; the answer is {"count", "max_model_len",
// "tokens", "token_strs"}.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req struct {
		Messages            []wireMessage     `json:"messages"`
		Tools               []json.RawMessage `json:"tools"`
		AddGenerationPrompt *bool             `json:"add_generation_prompt"`
		Prompt              *string           `json:"prompt"`
		ChatTemplateKwargs  any               `json:"chat_template_kwargs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	var ids []int32
	switch {
	case req.Prompt != nil:
		ids = Tokenize(*req.Prompt)
	case len(req.Messages) > 0:
		msgs, err := decodeMessages(req.Messages)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ids = s.template().TemplateFor(req.ChatTemplateKwargs).Render(msgs, req.Tools, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	default:
		writeError(w, http.StatusBadRequest, "messages or prompt: one is required")
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.opts.MaxModelLen, "tokens": ids, "token_strs": nil})
}

// detokenize serves vLLM's POST /detokenize: {"tokens"} → {"prompt"}, the
// ids spelled with their special tokens.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": Detokenize(req.Tokens, false)})
}

// decodeMessages converts wire messages.
func decodeMessages(in []wireMessage) ([]pipeline.Message, error) {
	out := make([]pipeline.Message, 0, len(in))
	for i, m := range in {
		content, parts, err := contentParts(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d].content: %v", i, err)
		}
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d].role: required", i)
		}
		msg := pipeline.Message{Role: m.Role, Content: content, Parts: parts, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, pipeline.ToolCall{ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		out = append(out, msg)
	}
	return out, nil
}

// contentParts reads a message content: a string, null, or a list of
// parts. Text-only lists have their texts joined (no separator); a list
// holding an image part ({type: image_url, image_url: {url} or URL}) is
// kept in parts, its texts joined with "\n" as trajflow joins them.
func contentParts(raw json.RawMessage) (string, []pipeline.ContentPart, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil, nil
	}
	var list []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", nil, errors.New("want a string or a list of content parts")
	}
	var b bytes.Buffer
	var parts []pipeline.ContentPart
	images := false
	for i, pt := range list {
		switch pt.Type {
		case "text", "input_text", "":
			b.WriteString(pt.Text)
			parts = append(parts, pipeline.ContentPart{Type: pipeline.PartText, Text: pt.Text})
		case "image_url", "input_image":
			var u string
			if json.Unmarshal(pt.ImageURL, &u) != nil {
				var obj struct {
					URL string `json:"url"`
				}
				if json.Unmarshal(pt.ImageURL, &obj) != nil {
					return "", nil, fmt.Errorf("[%d].image_url: want {url} or a URL", i)
				}
				u = obj.URL
			}
			if err := pipeline.CheckImageURL(u); err != nil {
				return "", nil, fmt.Errorf("[%d].image_url: %v", i, err)
			}
			parts = append(parts, pipeline.ContentPart{Type: pipeline.PartImage, ImageURL: u})
			images = true
		}
	}
	if !images {
		return b.String(), nil, nil
	}
	var texts []string
	for _, p := range parts {
		if p.Type == pipeline.PartText {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), parts, nil
}

// api is one API the simulator serves: the OpenAI API's chat and
// completions (openAIAPI) and SGLang's native /generate (nativeAPI,
// native.go). It reads a request body into the model's input and says how
// the reply is answered; the serving around it (the body read, the rate
// limits, faults, the scheduler, the charge, the write) is the Server's
// (handle, answer), whatever the API. Errors are client errors.
type api func(s *Server, body []byte) (*exchange, error)

// exchange is one request as its API read it.
type exchange struct {
	in       *input
	priority int
	// rid names the request to POST /abort_request {"rid"} (SGLang's);
	// "" when it has none.
	rid string
	// answer is the body answering rep.
	answer func(rep *reply) any
}

// handle serves the requests of a.
func (s *Server) handle(a api) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: only then does net/http notice a client that
		// goes away (and cancel r.Context()).
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		if !s.limits.admit(w) {
			return
		}
		s.answer(w, r, body, a, true)
	}
}

// openAIAPI is the OpenAI API: chat completions (chat) or completions
// (a text prompt, or token ids as vLLM takes them).
func openAIAPI(chat bool) api {
	return func(s *Server, body []byte) (*exchange, error) {
		req, err := decodeRequest(body, chat)
		if err != nil {
			return nil, err
		}
		var in *input
		switch {
		case chat:
			in, err = s.chatInput(req.messages, req.params, req.wire.Tools)
		case req.promptIDs != nil:
			in, err = s.tokenInput(req.promptIDs, req.params)
		default:
			in, err = s.completionInput(req.prompt, req.params)
		}
		if err != nil {
			return nil, err
		}
		model := req.wire.Model
		if model == "" {
			model = s.opts.Model
		}
		return &exchange{in: in, priority: req.priority, answer: func(rep *reply) any {
			return s.wireResponse(in, rep, req, chat, model)
		}}, nil
	}
}

// answer writes the response to a request body of a; faults says whether
// injected faults apply (not to the lines of a batch).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, body []byte, a api, faults bool) {
	f := fault{}
	if faults {
		f = s.drawFault()
	}
	if s.injectFault(w, r, f) {
		return
	}
	x, err := a(s, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rep, err := s.generate(x.in)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	k, err := s.run(withRID(r.Context(), x.rid), len(x.in.promptIDs), len(rep.ids), x.priority)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			writeError(w, http.StatusServiceUnavailable, err.Error())
		}
		return // the client went away
	}
	if k < len(rep.ids) {
		rep.cut(k)
	}
	s.limits.charge(len(x.in.promptIDs) + len(rep.ids))
	data, err := json.Marshal(x.answer(rep))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if f.kind == faultTruncate {
		truncate(w, data)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data) // best effort: the client may have gone
}

func (s *Server) wireResponse(in *input, rep *reply, req *parsedRequest, chat bool, model string) map[string]any {
	id := fmt.Sprintf("%016x", key(s.seed, in.promptKey, in.sampleKey, uint64(in.turn)))
	choice := map[string]any{"index": 0, "finish_reason": rep.finish}
	if req.wire.ReturnTokenIDs {
		choice["token_ids"] = rep.ids
	}
	out := map[string]any{
		"id":      "chatcmpl-" + id,
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   model,
		"choices": []any{choice},
		"usage": map[string]int{
			"prompt_tokens":     len(in.promptIDs),
			"completion_tokens": len(rep.ids),
			"total_tokens":      len(in.promptIDs) + len(rep.ids),
		},
		"sim_trailer": rep.trailer,
	}
	if req.wire.ReturnTokenIDs {
		out["prompt_token_ids"] = in.promptIDs
	}
	if chat {
		msg := map[string]any{"role": "assistant", "content": rep.content}
		if len(rep.toolCalls) > 0 {
			calls := make([]map[string]any, len(rep.toolCalls))
			for i, tc := range rep.toolCalls {
				calls[i] = map[string]any{"id": tc.ID, "type": "function",
					"function": map[string]string{"name": tc.Name, "arguments": tc.Arguments}}
			}
			msg["tool_calls"] = calls
			if rep.content == "" {
				msg["content"] = nil
			}
		}
		choice["message"] = msg
		if req.logprobs {
			content := make([]map[string]any, len(rep.ids))
			for i, id := range rep.ids {
				t := tokenText(id, false)
				content[i] = map[string]any{"token": t, "logprob": rep.logprobs[i], "bytes": []byte(t), "top_logprobs": []any{}}
			}
			choice["logprobs"] = map[string]any{"content": content}
		} else {
			choice["logprobs"] = nil
		}
		return out
	}
	out["id"] = "cmpl-" + id
	out["object"] = "text_completion"
	if moe := s.opts.MoE; moe.On() {
		choice["routed_experts"] = EncodeNPYRoutes(moe.Routes(int64(s.seed), slices.Concat(in.promptIDs, rep.ids)))
	}
	choice["text"] = rep.content
	if req.promptIDs != nil {
		choice["text"] = rep.text
	}
	if req.wire.ReturnTokenIDs {
		choice["prompt_token_ids"] = in.promptIDs
	}
	if req.logprobs {
		tokens := make([]string, len(rep.ids))
		offsets := make([]int, len(rep.ids))
		off := 0
		for i, id := range rep.ids {
			tokens[i] = tokenText(id, false)
			offsets[i] = off
			off += len(tokens[i])
		}
		choice["logprobs"] = map[string]any{"tokens": tokens, "token_logprobs": rep.logprobs, "text_offset": offsets, "top_logprobs": nil}
	} else {
		choice["logprobs"] = nil
	}
	return out
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	typ := "BadRequestError"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "RateLimitError"
	case status >= 500:
		typ = "InternalServerError"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// resetConn closes the connection without an answer (a TCP reset where the
// connection allows it).
func resetConn(w http.ResponseWriter) {
	conn, _, err := hijack(w)
	if err != nil {
		writeError(w, http.StatusBadGateway, "injected connection reset")
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// truncate sends headers promising the whole body, half of it, and closes
// the connection.
func truncate(w http.ResponseWriter, data []byte) {
	conn, buf, err := hijack(w)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data[:len(data)/2])
		return
	}
	defer func() { _ = conn.Close() }() // best effort: the simulator closes its connection
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(data))
	_, _ = buf.Write(data[:len(data)/2])
	_ = buf.Flush()
}

func hijack(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	return hj.Hijack()
}

// abort is POST /abort_request, SGLang's call: {"abort_all": true} cuts
// every request in flight short (AbortAll); each answers with the tokens
// it generated so far and finish_reason "abort". The answer is
// {"aborted": N}. {"rid": "..."} aborts the /generate requests of that rid
// alone (AbortRID); a body with neither is a 400.
func (s *Server) abort(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req struct {
		AbortAll bool   `json:"abort_all"`
		RID      string `json:"rid"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "abort_request: "+err.Error())
		return
	}
	switch {
	case req.AbortAll:
		writeJSON(w, http.StatusOK, map[string]int{"aborted": s.AbortAll()})
	case req.RID != "":
		writeJSON(w, http.StatusOK, map[string]int{"aborted": s.AbortRID(req.RID)})
	default:
		writeError(w, http.StatusBadRequest, `abort_request: want {"abort_all": true} or {"rid": "..."}`)
	}
}

// injectFault acts out f before a request is answered: an error status,
// a reset connection, a malformed body (each answers the request: true),
// or a stall before the answer (false: answer it, unless the client went
// away meanwhile). A truncated body is written by the caller.
func (s *Server) injectFault(w http.ResponseWriter, r *http.Request, f fault) bool {
	switch f.kind {
	case faultStatus:
		if f.status == http.StatusTooManyRequests || f.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(s.opts.Faults.RetryAfter.Seconds()))))
		}
		writeError(w, f.status, fmt.Sprintf("injected fault: HTTP %d", f.status))
		return true
	case faultReset:
		resetConn(w)
		return true
	case faultMalformed:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id": "chatcmpl-sim", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "`)
		return true
	case faultStall:
		return s.stall(r.Context()) != nil
	}
	return false
}
