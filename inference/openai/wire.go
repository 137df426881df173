package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"math"
	"net/http"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// The OpenAI wire format: request bodies written by encodeRequest, response
// bodies read by decodeResponse. Only the fields trajflow uses are declared;
// encoding/json skips the rest (top_logprobs, bytes, ...) without building
// them.

// wireMessage is a message as the server expects it: no token ids, no turn.
type wireMessage struct {
	Role string `json:"role"`
	// Content is a *string, or []pipeline.ChatPart for a message with images.
	Content    any            `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name string `json:"name"`
	// Arguments is a JSON string as OpenAI sends it; some servers send an
	// object, which decodeArguments accepts too.
	Arguments json.RawMessage `json:"arguments"`
}

// reservedKeys are body keys the request itself owns: a param of the same
// name is replaced (model, messages) or dropped (stream, stream_options:
// trajflow reads whole responses).
var reservedKeys = map[string]bool{"model": true, "messages": true, "stream": true, "stream_options": true}

func toWireMessages(msgs []pipeline.Message) []wireMessage {
	out := make([]wireMessage, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		w := wireMessage{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name}
		switch {
		case len(m.Parts) > 0:
			w.Content = pipeline.ChatParts(m.Parts)
		case m.Content != "" || len(m.ToolCalls) == 0:
			c := m.Content
			w.Content = &c
		}
		if len(m.ToolCalls) > 0 {
			w.ToolCalls = make([]wireToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				typ := tc.Type
				if typ == "" {
					typ = "function"
				}
				args, _ := json.Marshal(tc.Arguments)
				w.ToolCalls[j] = wireToolCall{ID: tc.ID, Type: typ, Function: wireFunction{Name: tc.Name, Arguments: args}}
			}
		}
		out[i] = w
	}
	return out
}

// renderPrompt is the completions prompt of a message list: every message's
// content concatenated in order, nothing added. A generated turn thus
// continues its prompt exactly, and an observation continues the turn.
func renderPrompt(msgs []pipeline.Message) string {
	var b strings.Builder
	for i := range msgs {
		b.WriteString(msgs[i].Content)
	}
	return b.String()
}

// encodeRequest builds the JSON body of req on the OpenAI API: every key
// of req.Params, then model, and the prompt: the token ids (a token-id
// completions request, tokenParams), a text prompt with text (the
// completions API: the params' prompt, or renderPrompt of the messages),
// or the messages (chat); then tools.
func encodeRequest(req *inference.Request, text bool) ([]byte, error) {
	body := make(map[string]any, len(req.Params)+3)
	for k, v := range req.Params {
		if reservedKeys[k] {
			continue
		}
		body[k] = v
	}
	body["model"] = req.Model
	if req.Priority != nil {
		body["priority"] = *req.Priority
	}
	switch {
	case req.PromptTokenIDs != nil:
		tokenParams(body)
		body["prompt"] = req.PromptTokenIDs
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("llm: encode request body: %w", err)
		}
		return b, nil
	case text:
		if _, ok := req.Params["prompt"]; !ok {
			body["prompt"] = renderPrompt(req.Messages)
		}
	default:
		body["messages"] = toWireMessages(req.Messages)
	}
	if len(req.Tools) > 0 {
		body["tools"] = req.Tools
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("llm: encode request body: %w", err)
	}
	return b, nil
}

// Where the OpenAI API's requests go, under the endpoint's base URL.
const (
	chatPath = "/chat/completions"
	// completionsPath is where text and token-id prompts go.
	completionsPath = "/completions"
)

// tokenIDHint is added to a refusal of a token-id prompt on
// /v1/completions.
const tokenIDHint = " (generate.api: tokens sends token-id prompts to /v1/completions; a server that does not take them needs generate.api: chat)"

// openAICall is req on the OpenAI API, the call of the chat, completions,
// tokens and batch protocols: a token-id prompt on /completions, a text
// prompt (text) on /completions, else the messages on /chat/completions.
func openAICall(req *inference.Request, text bool) (*Call, error) {
	body, err := encodeRequest(req, text)
	if err != nil {
		return nil, err
	}
	c := &Call{Path: chatPath, Body: body, Decode: decodeResponse}
	switch {
	case req.PromptTokenIDs != nil:
		c.Path = completionsPath
		c.Hint, c.HintOn = tokenIDHint, []int{http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusNotFound}
	case text:
		c.Path = completionsPath
	}
	return c, nil
}

// chatOnlyKeys are chat parameters a token-id completions request drops:
// the tools are already rendered into the prompt ids.
var chatOnlyKeys = []string{"tools", "tool_choice", "parallel_tool_calls", "prompt", "response_format", "chat_template_kwargs", "chat_template", "top_logprobs"}

// tokenParams adapts a body's chat parameters to a token-id completions
// request: return_token_ids on, logprobs as a count (true or absent: 1,
// the sampled token's), max_completion_tokens as max_tokens.
func tokenParams(body map[string]any) {
	for _, k := range chatOnlyKeys {
		delete(body, k)
	}
	body["return_token_ids"] = true
	switch v := body["logprobs"].(type) {
	case bool:
		if v {
			body["logprobs"] = 1
		} else {
			delete(body, "logprobs")
		}
	case nil:
		body["logprobs"] = 1
	}
	if v, ok := body["max_completion_tokens"]; ok {
		if _, has := body["max_tokens"]; !has {
			body["max_tokens"] = v
		}
		delete(body, "max_completion_tokens")
	}
}

// wireResponse is a chat.completion or text_completion body, with vLLM's
// token extras and the simulator's trailer.
type wireResponse struct {
	Choices        []wireChoice    `json:"choices"`
	Usage          *wireUsage      `json:"usage"`
	PromptTokenIDs []int32         `json:"prompt_token_ids"`
	SimTrailer     json.RawMessage `json:"sim_trailer"`
	Error          json.RawMessage `json:"error"`
}

type wireUsage struct {
	// PromptTokensDetails.CachedTokens are the prompt tokens served from
	// the provider's prompt cache (OpenAI's usage field).
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type wireChoice struct {
	Message        *wireRespMessage `json:"message"`
	Text           *string          `json:"text"`
	FinishReason   *string          `json:"finish_reason"`
	TokenIDs       []int32          `json:"token_ids"`
	PromptTokenIDs []int32          `json:"prompt_token_ids"`
	Logprobs       *wireLogprobs    `json:"logprobs"`
	// RoutedExperts is vLLM's (routes.go), read only when asked for.
	RoutedExperts *string `json:"routed_experts"`
}

type wireRespMessage struct {
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls"`
}

// wireLogprobs holds both shapes: chat (content[].logprob) and completions
// (token_logprobs[]; a null, the first of an echoed prompt, reads as 0:
// null leaves a number as it was).
type wireLogprobs struct {
	Content       []wireTokenLogprob `json:"content"`
	TokenLogprobs []float32          `json:"token_logprobs"`
}

type wireTokenLogprob struct {
	Logprob float32 `json:"logprob"`
}

var errNoChoices = errors.New("no choices in the response")

// decodeResponse parses a 2xx response body.
func decodeResponse(data []byte) (*inference.Response, error) {
	return decodeOpenAI(data, nil)
}

// decodeOpenAI is decodeResponse, which with routes set (a token-id
// request that asks for routed experts) decodes choices[0].routed_experts
// into the response's Routes, checked against the request.
func decodeOpenAI(data []byte, routes *inference.Request) (*inference.Response, error) {
	var w wireResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	if len(w.Choices) == 0 {
		if len(w.Error) > 0 && !bytes.Equal(w.Error, []byte("null")) {
			// A 200 carrying an error object: the server's own message.
			return nil, fmt.Errorf("%w; the server's error: %s", errNoChoices, serverMessage(data))
		}
		return nil, errNoChoices
	}
	ch := &w.Choices[0]
	resp := &inference.Response{Message: pipeline.Message{Role: pipeline.RoleAssistant}}
	if err := decodeMessage(ch, &resp.Message); err != nil {
		return nil, err
	}
	if ch.FinishReason != nil {
		resp.FinishReason = *ch.FinishReason
	}
	if w.Usage != nil {
		resp.PromptTokens = w.Usage.PromptTokens
		resp.CompletionTokens = w.Usage.CompletionTokens
		if d := w.Usage.PromptTokensDetails; d != nil {
			resp.CachedPromptTokens = d.CachedTokens
		}
	}
	resp.PromptTokenIDs = w.PromptTokenIDs
	if resp.PromptTokenIDs == nil {
		resp.PromptTokenIDs = ch.PromptTokenIDs
	}
	resp.Message.TokenIDs = ch.TokenIDs
	resp.Message.Logprobs = ch.Logprobs.values()
	if len(w.SimTrailer) > 0 && !bytes.Equal(w.SimTrailer, []byte("null")) {
		resp.Extra = w.SimTrailer
	}
	if routes != nil && ch.RoutedExperts != nil {
		const field = "choices[0].routed_experts"
		r, err := decodeNPYRoutes(field, *ch.RoutedExperts)
		if err != nil {
			return nil, err
		}
		if err := checkRoutes(field, r, len(routes.PromptTokenIDs), len(resp.Message.TokenIDs), routes.RoutedExpertsLayers); err != nil {
			return nil, err
		}
		resp.Routes = r
	}
	if err := checkNumbers(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// decodeMessage reads choices[0]'s text and tool calls into m: the chat
// message's, or the completions text.
func decodeMessage(ch *wireChoice, m *pipeline.Message) error {
	switch {
	case ch.Message != nil:
		if ch.Message.Content != nil {
			m.Content = *ch.Message.Content
		}
		if n := len(ch.Message.ToolCalls); n > 0 {
			m.ToolCalls = make([]pipeline.ToolCall, n)
			for i, tc := range ch.Message.ToolCalls {
				typ := tc.Type
				if typ == "" {
					typ = "function"
				}
				args, err := decodeArguments(tc.Function.Arguments)
				if err != nil {
					return fmt.Errorf("choices[0].message.tool_calls[%d].function.arguments: %w", i, err)
				}
				m.ToolCalls[i] = pipeline.ToolCall{ID: tc.ID, Type: typ, Name: tc.Function.Name, Arguments: args}
			}
		}
	case ch.Text != nil:
		m.Content = *ch.Text
	default:
		return errors.New("choices[0] has neither message nor text")
	}
	return nil
}

// values are the per-token logprobs of either shape; nil when there are
// none.
func (lp *wireLogprobs) values() []float32 {
	switch {
	case lp == nil:
		return nil
	case len(lp.Content) > 0:
		out := make([]float32, len(lp.Content))
		for i := range lp.Content {
			out[i] = lp.Content[i].Logprob
		}
		return out
	case len(lp.TokenLogprobs) > 0:
		return lp.TokenLogprobs
	}
	return nil
}

// maxTokenCount bounds the token counts a server may report: more than
// any context holds.
const maxTokenCount = 1 << 31

// maxLogprobSlack is how far above 0 a log-probability may be (a server's
// rounding); above it the value is not a log-probability.
const maxLogprobSlack = 1e-3

// checkNumbers refuses the numbers of a response that cannot be right:
// negative or huge token counts, negative token ids, and log-probabilities
// that are not finite or above 0. The error names the field.
func checkNumbers(resp *inference.Response) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"usage.prompt_tokens", resp.PromptTokens}, {"usage.completion_tokens", resp.CompletionTokens}} {
		if f.n < 0 || f.n > maxTokenCount {
			return fmt.Errorf("%s: %d is out of range (0 to %d)", f.name, f.n, maxTokenCount)
		}
	}
	for i, id := range resp.Message.TokenIDs {
		if id < 0 {
			return fmt.Errorf("choices[0].token_ids[%d]: %d is negative", i, id)
		}
	}
	for i, id := range resp.PromptTokenIDs {
		if id < 0 {
			return fmt.Errorf("prompt_token_ids[%d]: %d is negative", i, id)
		}
	}
	for i, lp := range resp.Message.Logprobs {
		if f := float64(lp); math.IsNaN(f) || math.IsInf(f, 0) || f > maxLogprobSlack {
			return fmt.Errorf("choices[0].logprobs[%d]: %v is not a log-probability (finite, <= 0)", i, lp)
		}
	}
	return nil
}

// decodeArguments returns a tool call's arguments as the JSON text the model
// wrote: the string's value when the server sends a string (OpenAI), the raw
// object when it sends one.
func decodeArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	return string(raw), nil
}

// serverMessage extracts a readable message from an error body: OpenAI's
// {"error": {"message": ...}}, vLLM's {"message": ...}, or the raw text.
func serverMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		if len(e.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
				return clip(inner.Message, 500)
			}
			var s string
			if json.Unmarshal(e.Error, &s) == nil && s != "" {
				return clip(s, 500)
			}
		}
		if e.Message != "" {
			return clip(e.Message, 500)
		}
		if len(e.Detail) > 0 {
			return clip(string(e.Detail), 500)
		}
	}
	return clip(strings.TrimSpace(string(body)), 500)
}

// contextLengthPhrases are how vLLM, SGLang and OpenAI say the prompt does
// not fit (matched case-insensitively in a 400 body).
var contextLengthPhrases = []string{
	"maximum context length",
	"context_length_exceeded",
	"please reduce the length",
	"model's context length",
	"longer than the model's context length",
}

func isContextLength(body []byte) bool {
	low := strings.ToLower(string(body))
	for _, p := range contextLengthPhrases {
		if strings.Contains(low, p) {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
