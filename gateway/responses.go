package gateway

import (
	"encoding/json"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// responsesCodec is the OpenAI Responses API (POST /v1/responses). The
// gateway keeps no state between calls: every call carries its whole
// input.
type responsesCodec struct{}

// responsesUnsupported are the Responses API parameters the gateway
// cannot honour.
var responsesUnsupported = map[string]string{
	"previous_response_id": "the gateway keeps no server state; send the whole conversation in input",
	"conversation":         "the gateway keeps no server state; send the whole conversation in input",
	"background":           "the gateway answers in the foreground only",
	"prompt":               "stored prompts are not supported; send instructions and input",
	"top_logprobs":         "the gateway returns no logprobs",
}

func parseResponses(body []byte) (*Call, *echo, *reqError) {
	o, e := decodeObj(body)
	if e != nil {
		return nil, nil, e
	}
	return responsesOf(o)
}

// responsesOf is a decoded Responses API request body as a Call.
func responsesOf(o obj) (*Call, *echo, *reqError) {
	if e := o.refuseUnsupported(responsesUnsupported); e != nil {
		return nil, nil, e
	}
	model, e := o.str("model")
	if e != nil {
		return nil, nil, e
	}
	c := &Call{API: AgentResponses, Params: map[string]any{}}
	if c.Stream, e = o.boolean("stream"); e != nil {
		return nil, nil, e
	}
	if o.has("include") {
		var inc []string
		if err := json.Unmarshal(o["include"], &inc); err != nil {
			return nil, nil, badf("include", "must be an array of strings")
		}
		for _, s := range inc {
			if s == "message.output_text.logprobs" {
				return nil, nil, badf("include", "%q is not supported: the gateway returns no logprobs", s)
			}
		}
	}
	if e := o.passNumbers(c.Params, "temperature", "top_p", "seed"); e != nil {
		return nil, nil, e
	}
	if n, ok, e := o.positiveInt("max_output_tokens"); e != nil {
		return nil, nil, e
	} else if ok {
		c.Params["max_tokens"] = n
	}
	if o.has("parallel_tool_calls") {
		b, e := o.boolean("parallel_tool_calls")
		if e != nil {
			return nil, nil, e
		}
		c.Params["parallel_tool_calls"] = b
	}
	if o.has("reasoning") {
		var r struct {
			Effort *string `json:"effort"`
		}
		if err := json.Unmarshal(o["reasoning"], &r); err != nil {
			return nil, nil, badf("reasoning", "must be an object {effort}")
		}
		if r.Effort != nil && *r.Effort != "" && *r.Effort != "none" {
			c.Params["reasoning_effort"] = *r.Effort
		}
	}
	if o.has("text") {
		var t struct {
			Format map[string]any `json:"format"`
		}
		if err := json.Unmarshal(o["text"], &t); err != nil {
			return nil, nil, badf("text", "must be an object {format}")
		}
		if t.Format != nil {
			f := t.Format
			if f["type"] == "json_schema" { // Responses' flat form → Chat's nested one
				js := map[string]any{}
				for _, k := range []string{"name", "schema", "strict", "description"} {
					if v, ok := f[k]; ok {
						js[k] = v
					}
				}
				f = map[string]any{"type": "json_schema", "json_schema": js}
			}
			if e := responseFormat(f, "text.format", c.Params); e != nil {
				return nil, nil, e
			}
		}
	}

	if o.has("tools") {
		var tools []map[string]json.RawMessage
		if err := json.Unmarshal(o["tools"], &tools); err != nil {
			return nil, nil, badf("tools", "must be an array of tool objects")
		}
		for i, t := range tools {
			w := fmt.Sprintf("tools[%d]", i)
			to := obj(t)
			typ, _ := to.str("type")
			if typ != "function" {
				return nil, nil, badf(w+".type", "only function tools are supported by the gateway, not %q", typ)
			}
			name, _ := to.str("name")
			if name == "" {
				return nil, nil, badf(w+".name", "missing: a function tool needs a name")
			}
			desc, e := to.str("description")
			if e != nil {
				e.Param = w + ".description"
				return nil, nil, e
			}
			c.Tools = append(c.Tools, chatTool(name, desc, t["parameters"], t["strict"]))
		}
	}
	if o.has("tool_choice") {
		switch tc := o.any("tool_choice").(type) {
		case string:
			c.Params["tool_choice"] = tc
		case map[string]any:
			if tc["type"] != "function" {
				return nil, nil, badf("tool_choice.type", "only function tool choices are supported by the gateway, not %v", tc["type"])
			}
			c.Params["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc["name"]}}
		default:
			return nil, nil, badf("tool_choice", "must be a string or an object")
		}
	}

	if ins, e := o.str("instructions"); e != nil {
		return nil, nil, e
	} else if ins != "" {
		c.Messages = append(c.Messages, pipeline.Message{Role: pipeline.RoleSystem, Content: ins})
	}
	if !o.has("input") {
		return nil, nil, badf("input", "missing: a call needs input")
	}
	var s string
	if json.Unmarshal(o["input"], &s) == nil {
		c.Messages = append(c.Messages, pipeline.Message{Role: pipeline.RoleUser, Content: s})
	} else {
		var items []json.RawMessage
		if err := json.Unmarshal(o["input"], &items); err != nil {
			return nil, nil, badf("input", "must be a string or an array of input items")
		}
		if len(items) == 0 {
			return nil, nil, badf("input", "is empty: a call needs at least one input item")
		}
		seen := map[string]bool{}
		for i, raw := range items {
			w := fmt.Sprintf("input[%d]", i)
			var it obj
			if err := json.Unmarshal(raw, &it); err != nil || it == nil {
				return nil, nil, badf(w, "must be an input item object")
			}
			typ, e := it.str("type")
			if e != nil {
				e.Param = w + ".type"
				return nil, nil, e
			}
			if typ == "" && it.has("role") {
				typ = "message"
			}
			switch typ {
			case "message":
				role, _ := it.str("role")
				var pm pipeline.Message
				switch role {
				case "system", "developer":
					pm.Role = pipeline.RoleSystem
				case "user":
					pm.Role = pipeline.RoleUser
				case "assistant":
					pm.Role = pipeline.RoleAssistant
				default:
					return nil, nil, badf(w+".role", "unknown role %q (want system, developer, user or assistant)", role)
				}
				if pm.Content, e = textOf(it["content"], w+".content", "input_text", "output_text", "text", "refusal"); e != nil {
					return nil, nil, e
				}
				c.Messages = append(c.Messages, pm)
			case "function_call":
				var fc struct {
					CallID    string `json:"call_id"`
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				}
				if err := json.Unmarshal(raw, &fc); err != nil || fc.CallID == "" {
					return nil, nil, badf(w+".call_id", "missing: a function_call item needs call_id, name and arguments")
				}
				seen[fc.CallID] = true
				tc := pipeline.ToolCall{ID: fc.CallID, Type: "function", Name: fc.Name, Arguments: fc.Arguments}
				// Calls that follow an assistant message are that message's
				// tool calls, as Chat Completions has them.
				if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == pipeline.RoleAssistant {
					c.Messages[n-1].ToolCalls = append(c.Messages[n-1].ToolCalls, tc)
				} else {
					c.Messages = append(c.Messages, pipeline.Message{Role: pipeline.RoleAssistant, ToolCalls: []pipeline.ToolCall{tc}})
				}
			case "function_call_output":
				id, e := it.str("call_id")
				if e != nil {
					e.Param = w + ".call_id"
					return nil, nil, e
				}
				if !seen[id] {
					return nil, nil, badf(w+".call_id", "no earlier function_call has call_id %q", id)
				}
				out, e := textOf(it["output"], w+".output", "input_text", "output_text", "text")
				if e != nil {
					return nil, nil, e
				}
				c.Messages = append(c.Messages, pipeline.Message{Role: pipeline.RoleTool, Content: out, ToolCallID: id})
			case "reasoning":
				// The model's earlier reasoning, echoed back by some SDKs:
				// not part of the conversation the Model sees.
			case "item_reference":
				return nil, nil, badf(w+".type", "item references are not supported: the gateway keeps no server state")
			default:
				return nil, nil, badf(w+".type", "input item type %q is not supported by the gateway (want message, function_call or function_call_output)", typ)
			}
		}
	}
	if len(c.Messages) == 0 {
		return nil, nil, badf("input", "holds no message")
	}
	return c, &echo{Model: model, Raw: o}, nil
}

func (responsesCodec) parse(body []byte) (*Call, *echo, *reqError) { return parseResponses(body) }

func (responsesCodec) check(*Answer) *reqError { return nil }

// responsesItems are the output items of a: a message (when it has
// text or no tool call) then a function_call per tool call.
func responsesItems(a *Answer, id *ids) []map[string]any {
	var out []map[string]any
	if a.Message.Content != "" || len(a.Message.ToolCalls) == 0 {
		out = append(out, map[string]any{
			"type": "message", "id": "msg_" + id.Msg, "status": "completed", "role": "assistant",
			"content": []any{outputText(a.Message.Content)},
		})
	}
	for i, tc := range a.Message.ToolCalls {
		out = append(out, map[string]any{
			"type": "function_call", "id": fmt.Sprintf("fc_%s_%d", id.Msg, i), "call_id": tc.ID,
			"name": tc.Name, "arguments": tc.Arguments, "status": "completed",
		})
	}
	return out
}

func outputText(t string) map[string]any {
	return map[string]any{"type": "output_text", "text": t, "annotations": []any{}, "logprobs": []any{}}
}

// responseObject is the response object of a call: in progress (a nil
// answer, no output yet) or complete.
func responseObject(req *echo, a *Answer, id *ids) map[string]any {
	r := map[string]any{
		"id": "resp_" + id.Resp, "object": "response", "created_at": id.Created,
		"status": "in_progress", "error": nil, "incomplete_details": nil,
		"instructions": req.Raw.any("instructions"), "model": req.Model,
		"output": []any{}, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "metadata": map[string]any{},
		"temperature": req.Raw.any("temperature"), "top_p": req.Raw.any("top_p"),
		"max_output_tokens": req.Raw.any("max_output_tokens"),
		"text":              map[string]any{"format": map[string]any{"type": "text"}},
		"truncation":        "disabled", "usage": nil, "store": false,
		"reasoning": map[string]any{"effort": nil, "summary": nil},
	}
	for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "metadata", "text"} {
		if v := req.Raw.any(k); v != nil {
			r[k] = v
		}
	}
	if a == nil {
		return r
	}
	items := responsesItems(a, id)
	if req.Gym {
		gymTokens(items, a)
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	r["output"] = out
	r["status"] = "completed"
	if a.FinishReason == "length" {
		r["status"] = "incomplete"
		r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	r["usage"] = map[string]any{
		"input_tokens": a.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": a.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": a.PromptTokens + a.CompletionTokens,
	}
	return r
}

func (responsesCodec) render(req *echo, a *Answer, id *ids) any { return responseObject(req, a, id) }

func (responsesCodec) stream(w *sse, req *echo, a *Answer, id *ids) {
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		w.event(typ, mustJSON(fields))
	}
	ev("response.created", map[string]any{"response": responseObject(req, nil, id)})
	ev("response.in_progress", map[string]any{"response": responseObject(req, nil, id)})
	for i, item := range responsesItems(a, id) {
		itemID := item["id"]
		switch item["type"] {
		case "message":
			text := a.Message.Content
			added := map[string]any{"type": "message", "id": itemID, "status": "in_progress", "role": "assistant", "content": []any{}}
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			empty := outputText("")
			ev("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": empty})
			for _, p := range split(text) {
				ev("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
			}
			ev("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			ev("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": outputText(text)})
		case "function_call":
			added := map[string]any{}
			for k, v := range item {
				added[k] = v
			}
			added["arguments"], added["status"] = "", "in_progress"
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			args, _ := item["arguments"].(string)
			for _, p := range split(args) {
				ev("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": p})
			}
			ev("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "name": item["name"], "arguments": args})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	final := responseObject(req, a, id)
	if final["status"] == "incomplete" {
		ev("response.incomplete", map[string]any{"response": final})
	} else {
		ev("response.completed", map[string]any{"response": final})
	}
}
