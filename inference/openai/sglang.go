package openai

// generate.api: sglang: SGLang's native POST /generate, written from
// SGLang's source at revision 0025436eab0556737d615b36a4dd3e1e26e82f3d
// (python/sglang/srt/entrypoints/http_server.py: /generate, /abort_request,
// /tokenize) with python/sglang/srt/managers/io_struct.py (GenerateReqInput)
// at 001067fffe33427bee0ed2f007fb7551a1d76b44 and
// python/sglang/srt/sampling/sampling_params.py (SamplingParams) at
// 00c17cafcb9e289d5ca97c50e44ada54e4fd5b03.
//
// The request is {"input_ids": [...], "sampling_params": {...},
// "return_logprob": true, "rid": "...", "priority": N}; the answer is
// {"text", "output_ids": [...], "meta_info": {"id", "finish_reason":
// {"type": "stop"|"length"|"abort", ...}, "prompt_tokens",
// "completion_tokens", "cached_tokens", "output_token_logprobs":
// [[logprob, token_id, text|null], ...]}}.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// sglangPath is where generate.api: sglang sends token-id prompts, under
// the server's root (not /v1).
const sglangPath = "/generate"

// sglangSampling maps a generate.params key (or a key of its extra_body)
// to its SamplingParams field;
// the keys absent here and from sglangDropped go into sampling_params
// unchanged, so that SGLang names an unknown one in its 400.
var sglangSampling = map[string]string{
	"max_tokens":            "max_new_tokens",
	"max_completion_tokens": "max_new_tokens",
	"min_tokens":            "min_new_tokens",
	"seed":                  "sampling_seed",
}

// sglangDropped are generate.params keys of the OpenAI APIs that are no
// sampling parameter of /generate: what they ask for is either always on
// (return_logprob, output_ids) or belongs to the chat template, which
// trajflow has already applied to the ids.
var sglangDropped = map[string]bool{
	"logprobs": true, "top_logprobs": true, "return_token_ids": true, "echo": true,
	"stream": true, "stream_options": true, "user": true, "model": true,
	"chat_template_kwargs": true, "chat_template": true, "add_special_tokens": true,
	"add_generation_prompt": true, "continue_final_message": true,
	"parallel_tool_calls": true, "tool_choice": true, "reasoning_effort": true,
	"priority": true, // top level in GenerateReqInput, not a sampling parameter
}

// encodeSGLang is the /generate body of a token-id prompt. rid names the
// request (SGLang's "rid", which POST /abort_request takes).
func encodeSGLang(req *inference.Request, rid string) ([]byte, error) {
	sp := make(map[string]any, len(req.Params))
	add := func(params map[string]any) {
		for k, v := range params {
			if sglangDropped[k] || k == "extra_body" {
				continue
			}
			if to, ok := sglangSampling[k]; ok {
				if k == "max_completion_tokens" {
					if _, has := params["max_tokens"]; has {
						continue // max_tokens wins, as in the OpenAI bodies
					}
				}
				k = to
			}
			sp[k] = v
		}
	}
	add(req.Params)
	// extra_body's keys are the body's, as an OpenAI SDK sends them; they
	// win over the top-level ones.
	if eb, ok := req.Params["extra_body"].(map[string]any); ok {
		add(eb)
	}
	body := map[string]any{
		"input_ids":       req.PromptTokenIDs,
		"sampling_params": sp,
		"return_logprob":  true,
		"stream":          false,
	}
	if rid != "" {
		body["rid"] = rid
	}
	if req.RoutedExperts {
		body["return_routed_experts"] = true
	}
	if req.Priority != nil {
		body["priority"] = *req.Priority
	} else if p, ok := req.Params["priority"]; ok && p != nil {
		body["priority"] = p
	}
	return json.Marshal(body)
}

// sglangResponse is /generate's answer to one prompt.
type sglangResponse struct {
	Text      *string         `json:"text"`
	OutputIDs []int32         `json:"output_ids"`
	MetaInfo  *sglangMeta     `json:"meta_info"`
	Error     json.RawMessage `json:"error"`
	// SimTrailer is the simulator's trailer (inference/sim).
	SimTrailer json.RawMessage `json:"sim_trailer"`
}

type sglangMeta struct {
	ID                  string          `json:"id"`
	FinishReason        json.RawMessage `json:"finish_reason"`
	PromptTokens        int             `json:"prompt_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	CachedTokens        int             `json:"cached_tokens"`
	OutputTokenLogprobs []sglangLogprob `json:"output_token_logprobs"`
	// RoutedExperts is read only when asked for (routes.go).
	RoutedExperts *string `json:"routed_experts"`
}

// sglangLogprob is one entry of output_token_logprobs: [logprob, token_id,
// text], the text (null unless return_text_in_logprobs) not read. The
// logprob is null where SGLang has none (NaN and infinities are written
// as null).
type sglangLogprob struct {
	LP    float64
	HasLP bool
	ID    int32
}

// UnmarshalJSON reads an entry without allocating: encoding/json has
// checked that data is one JSON value.
func (e *sglangLogprob) UnmarshalJSON(data []byte) error {
	rest := bytes.TrimSpace(data)
	if len(rest) == 0 || rest[0] != '[' {
		return errors.New("want [logprob, token_id, ...]")
	}
	rest = rest[1:]
	lp, rest, err := scalar(rest)
	if err != nil {
		return fmt.Errorf("[0]: %w", err)
	}
	if len(rest) == 0 || rest[0] != ',' {
		return errors.New("want [logprob, token_id, ...], got one item")
	}
	id, rest, err := scalar(rest[1:])
	if err != nil {
		return fmt.Errorf("[1]: %w", err)
	}
	if len(rest) == 0 || rest[0] != ',' && rest[0] != ']' {
		return errors.New("want [logprob, token_id, ...]")
	}
	*e = sglangLogprob{}
	if string(lp) != "null" {
		f, err := strconv.ParseFloat(string(lp), 64)
		if err != nil {
			return fmt.Errorf("[0]: %q is not a number", lp)
		}
		e.LP, e.HasLP = f, true
	}
	n, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return fmt.Errorf("[1]: %q is not a token id", id)
	}
	e.ID = int32(n)
	return nil
}

// scalar splits the JSON number or null at the start of b (after blanks)
// from what follows it (blanks skipped). Anything else is an error.
func scalar(b []byte) (v, rest []byte, err error) {
	b = bytes.TrimLeft(b, " \t\r\n")
	i := 0
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= 'a' && b[i] <= 'z') {
		i++
	}
	if i == 0 {
		if len(b) == 0 {
			return nil, nil, errors.New("missing")
		}
		return nil, nil, fmt.Errorf("want a number, got %q", b[0])
	}
	return b[:i], bytes.TrimLeft(b[i:], " \t\r\n"), nil
}

// decodeSGLang parses a 2xx /generate body.
func decodeSGLang(data []byte) (*inference.Response, error) { return decodeSGLangFor(data, nil) }

// decodeSGLangFor is decodeSGLang, which with routes set (a request that
// asks for routed experts) decodes meta_info.routed_experts into the
// response's Routes, over the request's prompt and the output but its
// last token.
func decodeSGLangFor(data []byte, routes *inference.Request) (*inference.Response, error) {
	var w sglangResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	if w.MetaInfo == nil {
		if len(w.Error) > 0 && !bytes.Equal(w.Error, []byte("null")) {
			return nil, fmt.Errorf("no meta_info in the response; the server's error: %s", serverMessage(data))
		}
		return nil, errors.New("no meta_info in the response")
	}
	m := w.MetaInfo
	resp := &inference.Response{Message: pipeline.Message{Role: pipeline.RoleAssistant}}
	if w.Text != nil {
		resp.Message.Content = *w.Text
	}
	finish, err := sglangFinish(m.FinishReason)
	if err != nil {
		return nil, err
	}
	resp.FinishReason = finish
	resp.PromptTokens, resp.CompletionTokens, resp.CachedPromptTokens = m.PromptTokens, m.CompletionTokens, m.CachedTokens
	if m.CachedTokens < 0 || m.CachedTokens > m.PromptTokens {
		return nil, fmt.Errorf("meta_info.cached_tokens: %d is out of range (0 to prompt_tokens %d)", m.CachedTokens, m.PromptTokens)
	}
	ids, lps, err := sglangTokens(w.OutputIDs, m.OutputTokenLogprobs)
	if err != nil {
		return nil, err
	}
	resp.Message.Logprobs = lps
	if ids == nil {
		ids = []int32{}
	}
	resp.Message.TokenIDs = ids
	if routes != nil && m.RoutedExperts != nil {
		p := len(routes.PromptTokenIDs)
		r, err := decodeSGLangRoutes(*m.RoutedExperts, max(p+len(ids)-1, 0), routes.RoutedExpertsLayers)
		if err != nil {
			return nil, err
		}
		resp.Routes = r
	}
	if len(w.SimTrailer) > 0 && !bytes.Equal(w.SimTrailer, []byte("null")) {
		resp.Extra = w.SimTrailer
	}
	if err := checkNumbers(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// sglangTokens checks output_ids against output_token_logprobs and
// returns the generated ids (those of the logprobs from a server that
// sends no output_ids) and their logprobs (nil when there are none).
func sglangTokens(ids []int32, entries []sglangLogprob) ([]int32, []float32, error) {
	n := len(entries)
	if n == 0 && ids == nil {
		return nil, nil, nil
	}
	lps := make([]float32, n)
	lpIDs := make([]int32, n)
	for i, e := range entries {
		if e.HasLP {
			lps[i] = float32(max(e.LP, -math.MaxFloat32)) // -inf is spelt as a huge negative number by some servers
		}
		lpIDs[i] = e.ID
	}
	switch {
	case ids == nil:
		ids = lpIDs // a server that sends no output_ids: the ids of the logprobs
	case n == 0 && len(ids) > 0:
		return nil, nil, fmt.Errorf("meta_info.output_token_logprobs: none for %d output_ids (return_logprob was sent)", len(ids))
	case n != len(ids):
		return nil, nil, fmt.Errorf("meta_info.output_token_logprobs: %d entries for %d output_ids", n, len(ids))
	default:
		for i := range ids {
			if ids[i] != lpIDs[i] {
				return nil, nil, fmt.Errorf("meta_info.output_token_logprobs[%d]: token %d, output_ids has %d", i, lpIDs[i], ids[i])
			}
		}
	}
	if n == 0 {
		lps = nil
	}
	return ids, lps, nil
}

// sglangFinish reads meta_info.finish_reason: {"type": "stop", "matched":
// ...}, {"type": "length", "length": N}, {"type": "abort", "message": ...}
// (null while a request runs, never in a whole answer). An aborted request
// finishes with inference.FinishAbort.
func sglangFinish(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", errors.New("meta_info.finish_reason: missing")
	}
	var f struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		// A plain string, as some versions write it.
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", fmt.Errorf("meta_info.finish_reason: %w", err)
		}
		f.Type = s
	}
	switch f.Type {
	case "stop", "length":
		return f.Type, nil
	case "abort":
		return inference.FinishAbort, nil
	}
	return "", fmt.Errorf("meta_info.finish_reason.type: %q is not stop, length or abort", f.Type)
}

// newRID is a request id for SGLang's "rid": unique per request sent.
func newRID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // best effort: crypto/rand.Read never returns an error
	return "tf-" + hex.EncodeToString(b[:])
}

// sglang is generate.api: sglang: the generate stage holds each
// trajectory's token ids as with tokens, and sends each token-id prompt
// to SGLang's native POST {root}/generate (encodeSGLang, decodeSGLang),
// named by a fresh rid; a pause aborts this client's requests alone, by
// rid, and each answers with the tokens it generated, so the turn
// continues token-in-token-out. Its requests without ids (the checks of
// trajflow validate) are chat requests.
type sglang struct{}

func (sglang) API() inference.API { return inference.APISGLang }

func (sglang) Caps() inference.Caps {
	return inference.Caps{
		Tokens: true, TokenAPI: inference.APISGLang, TokenPrompts: "SGLang's /generate",
		AbortContinues: true, RoutedExperts: true,
	}
}

// sglangHint is added to a 404 or 405 of /generate.
const sglangHint = " (generate.api: sglang sends token-id prompts to SGLang's native POST /generate; other servers need generate.api: tokens or chat)"

func (sglang) Call(req *inference.Request) (*Call, error) {
	if req.PromptTokenIDs == nil {
		return openAICall(req, false)
	}
	rid := newRID()
	body, err := encodeSGLang(req, rid)
	if err != nil {
		return nil, fmt.Errorf("llm: encode /generate body: %w", err)
	}
	return &Call{
		Path: sglangPath, Root: true, Body: body, ID: rid,
		Hint: sglangHint, HintOn: []int{http.StatusNotFound, http.StatusMethodNotAllowed},
		// The priority is GenerateReqInput's own field: no fallback.
		PriorityFinal: true,
		Decode: func(data []byte) (*inference.Response, error) {
			var routes *inference.Request
			if req.RoutedExperts {
				routes = req
			}
			resp, err := decodeSGLangFor(data, routes)
			if err != nil {
				return nil, err
			}
			if resp.PromptTokens == 0 {
				resp.PromptTokens = len(req.PromptTokenIDs)
			}
			if resp.CompletionTokens == 0 {
				resp.CompletionTokens = len(resp.Message.TokenIDs)
			}
			return resp, nil
		},
	}, nil
}

// AbortBodies is POST /abort_request {"rid": rid} for each of this
// client's requests in flight on the endpoint, so that a pause aborts none
// of another client's requests on a shared server (abort_all would).
// SGLang answers 200 for an rid it no longer holds.
func (sglang) AbortBodies(rids []string) []string {
	out := make([]string, len(rids))
	for i, rid := range rids {
		body, _ := json.Marshal(map[string]string{"rid": rid}) // best effort: a map of strings always marshals
		out[i] = string(body)
	}
	return out
}
