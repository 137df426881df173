package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// chatCodec is OpenAI Chat Completions (POST /v1/chat/completions).
type chatCodec struct{}

// chatUnsupported are the Chat Completions parameters that change what
// is generated or returned and that the gateway cannot honour.
var chatUnsupported = map[string]string{
	"logit_bias":         "the model's logits cannot be biased through the gateway",
	"logprobs":           "the gateway returns no logprobs",
	"top_logprobs":       "the gateway returns no logprobs",
	"audio":              "the gateway speaks text only",
	"prediction":         "predicted outputs are not supported",
	"web_search_options": "the gateway has no web search",
	"functions":          "the legacy functions parameter is not supported; send tools",
	"function_call":      "the legacy function_call parameter is not supported; send tool_choice",
}

// parseChat is a Chat Completions request body as a Call.
func parseChat(body []byte) (*Call, *echo, *reqError) {
	o, e := decodeObj(body)
	if e != nil {
		return nil, nil, e
	}
	if e := o.refuseUnsupported(chatUnsupported); e != nil {
		return nil, nil, e
	}
	model, e := o.str("model")
	if e != nil {
		return nil, nil, e
	}
	if model == "" {
		return nil, nil, badf("model", "missing: Chat Completions requires a model")
	}
	if n, ok, e := o.positiveInt("n"); e != nil {
		return nil, nil, e
	} else if ok && n > 1 {
		return nil, nil, badf("n", "must be 1: the gateway answers one choice per call (ask %d times instead)", n)
	}
	if o.has("modalities") {
		var mods []string
		if err := json.Unmarshal(o["modalities"], &mods); err != nil {
			return nil, nil, badf("modalities", "must be an array of strings")
		}
		for _, m := range mods {
			if m != "text" {
				return nil, nil, badf("modalities", "only text is supported by the gateway, not %q", m)
			}
		}
	}
	c := &Call{API: AgentChat, Params: map[string]any{}}
	if c.Stream, e = o.boolean("stream"); e != nil {
		return nil, nil, e
	}
	ec := &echo{Model: model, Raw: o}
	if o.has("stream_options") {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(o["stream_options"], &so); err != nil {
			return nil, nil, badf("stream_options", "must be an object {include_usage: bool}")
		}
		ec.IncludeUsage = so.IncludeUsage
	}
	if e := o.passNumbers(c.Params, "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "top_k", "min_p", "repetition_penalty"); e != nil {
		return nil, nil, e
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		n, ok, e := o.positiveInt(k)
		if e != nil {
			return nil, nil, e
		}
		if ok {
			c.Params["max_tokens"] = n
		}
	}
	if o.has("stop") {
		var one string
		var many []string
		if json.Unmarshal(o["stop"], &one) == nil {
			c.Params["stop"] = []string{one}
		} else if json.Unmarshal(o["stop"], &many) == nil {
			c.Params["stop"] = many
		} else {
			return nil, nil, badf("stop", "must be a string or an array of strings")
		}
	}
	if o.has("parallel_tool_calls") {
		b, e := o.boolean("parallel_tool_calls")
		if e != nil {
			return nil, nil, e
		}
		c.Params["parallel_tool_calls"] = b
	}
	if re, e := o.str("reasoning_effort"); e != nil {
		return nil, nil, e
	} else if re != "" {
		c.Params["reasoning_effort"] = re
	}
	if e := responseFormat(o.any("response_format"), "response_format", c.Params); e != nil {
		return nil, nil, e
	}

	if o.has("tools") {
		var tools []map[string]json.RawMessage
		var raws []json.RawMessage
		if err := json.Unmarshal(o["tools"], &tools); err != nil || json.Unmarshal(o["tools"], &raws) != nil {
			return nil, nil, badf("tools", "must be an array of tool objects")
		}
		for i, t := range tools {
			w := fmt.Sprintf("tools[%d]", i)
			typ, e := obj(t).str("type")
			if e != nil || typ != "function" {
				return nil, nil, badf(w+".type", "only function tools are supported by the gateway, not %q", typ)
			}
			var fn struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      json.RawMessage `json:"strict"`
			}
			if err := json.Unmarshal(t["function"], &fn); err != nil || fn.Name == "" {
				return nil, nil, badf(w+".function.name", "missing: a function tool needs a name")
			}
			// The tool as the agent wrote it, keys in its order: the
			// template renders what the agent sent.
			var b bytes.Buffer
			if err := json.Compact(&b, raws[i]); err != nil {
				return nil, nil, badf(w, "is not valid JSON")
			}
			c.Tools = append(c.Tools, b.Bytes())
		}
	}
	if o.has("tool_choice") {
		c.Params["tool_choice"] = o.any("tool_choice")
	}

	if !o.has("messages") {
		return nil, nil, badf("messages", "missing: a call needs at least one message")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(o["messages"], &msgs); err != nil {
		return nil, nil, badf("messages", "must be an array of message objects")
	}
	if len(msgs) == 0 {
		return nil, nil, badf("messages", "is empty: a call needs at least one message")
	}
	seen := map[string]bool{}
	for i, raw := range msgs {
		w := fmt.Sprintf("messages[%d]", i)
		m := obj(raw)
		role, e := m.str("role")
		if e != nil {
			e.Param = w + ".role"
			return nil, nil, e
		}
		var pm pipeline.Message
		switch role {
		case "system", "developer":
			pm.Role = pipeline.RoleSystem
		case "user":
			pm.Role = pipeline.RoleUser
		case "assistant":
			pm.Role = pipeline.RoleAssistant
		case "tool":
			pm.Role = pipeline.RoleTool
		default:
			return nil, nil, badf(w+".role", "unknown role %q (want system, developer, user, assistant or tool)", role)
		}
		text, e := textOf(m["content"], w+".content", "text", "refusal")
		if e != nil {
			return nil, nil, e
		}
		pm.Content = text
		if pm.Name, e = m.str("name"); e != nil {
			e.Param = w + ".name"
			return nil, nil, e
		}
		if role == "assistant" && m.has("tool_calls") {
			var tcs []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			}
			if err := json.Unmarshal(m["tool_calls"], &tcs); err != nil {
				return nil, nil, badf(w+".tool_calls", "must be an array of {id, type, function: {name, arguments}}")
			}
			for j, tc := range tcs {
				if tc.ID == "" {
					return nil, nil, badf(fmt.Sprintf("%s.tool_calls[%d].id", w, j), "missing")
				}
				seen[tc.ID] = true
				pm.ToolCalls = append(pm.ToolCalls, pipeline.ToolCall{ID: tc.ID, Type: "function", Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		}
		if role == "tool" {
			id, e := m.str("tool_call_id")
			if e != nil {
				e.Param = w + ".tool_call_id"
				return nil, nil, e
			}
			if !seen[id] {
				return nil, nil, badf(w+".tool_call_id", "no earlier tool call has id %q", id)
			}
			pm.ToolCallID = id
		}
		c.Messages = append(c.Messages, pm)
	}
	return c, ec, nil
}

// responseFormat puts a JSON response format (json_object, json_schema)
// into params; text is the default and is dropped.
func responseFormat(v any, where string, params map[string]any) *reqError {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return badf(where, "must be an object with a type")
	}
	switch m["type"] {
	case "text", nil:
		return nil
	case "json_object", "json_schema":
		params["response_format"] = m
		return nil
	}
	return badf(where+".type", "unknown response format %v (want text, json_object or json_schema)", m["type"])
}

func (chatCodec) parse(body []byte) (*Call, *echo, *reqError) { return parseChat(body) }

func (chatCodec) check(*Answer) *reqError { return nil }

func chatToolCalls(a *Answer) []any {
	var out []any
	for _, tc := range a.Message.ToolCalls {
		out = append(out, map[string]any{
			"id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
		})
	}
	return out
}

func chatUsage(a *Answer) map[string]any {
	return map[string]any{
		"prompt_tokens":     a.PromptTokens,
		"completion_tokens": a.CompletionTokens,
		"total_tokens":      a.PromptTokens + a.CompletionTokens,
	}
}

func (chatCodec) render(req *echo, a *Answer, id *ids) any {
	msg := map[string]any{"role": "assistant", "content": a.Message.Content, "refusal": nil}
	if tcs := chatToolCalls(a); len(tcs) > 0 {
		msg["tool_calls"] = tcs
		if a.Message.Content == "" {
			msg["content"] = nil
		}
	}
	return map[string]any{
		"id":      "chatcmpl-" + id.Resp,
		"object":  "chat.completion",
		"created": id.Created,
		"model":   req.Model,
		"choices": []any{map[string]any{
			"index": 0, "message": msg, "finish_reason": a.FinishReason, "logprobs": nil,
		}},
		"usage":              chatUsage(a),
		"system_fingerprint": nil,
	}
}

func (chatCodec) stream(w *sse, req *echo, a *Answer, id *ids) {
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{
			"id": "chatcmpl-" + id.Resp, "object": "chat.completion.chunk",
			"created": id.Created, "model": req.Model, "system_fingerprint": nil,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if req.IncludeUsage {
			c["usage"] = nil
		}
		w.event("", mustJSON(c))
	}
	chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)
	for _, p := range split(a.Message.Content) {
		chunk(map[string]any{"content": p}, nil)
	}
	for i, tc := range a.Message.ToolCalls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""},
		}}}, nil)
		for _, p := range split(tc.Arguments) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": p},
			}}}, nil)
		}
	}
	chunk(map[string]any{}, a.FinishReason)
	if req.IncludeUsage {
		w.event("", mustJSON(map[string]any{
			"id": "chatcmpl-" + id.Resp, "object": "chat.completion.chunk",
			"created": id.Created, "model": req.Model, "system_fingerprint": nil,
			"choices": []any{}, "usage": chatUsage(a),
		}))
	}
	w.event("", []byte("[DONE]"))
}
