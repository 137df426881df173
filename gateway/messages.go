package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// messagesCodec is Anthropic Messages (POST /v1/messages).
type messagesCodec struct{}

var messagesUnsupported = map[string]string{
	"container":   "the gateway runs no code containers",
	"mcp_servers": "the gateway connects to no MCP servers",
}

func parseMessages(body []byte) (*Call, *echo, *reqError) {
	o, e := decodeObj(body)
	if e != nil {
		return nil, nil, e
	}
	if e := o.refuseUnsupported(messagesUnsupported); e != nil {
		return nil, nil, e
	}
	model, e := o.str("model")
	if e != nil {
		return nil, nil, e
	}
	if model == "" {
		return nil, nil, badf("model", "missing: Messages requires a model")
	}
	c := &Call{API: AgentMessages, Params: map[string]any{}}
	n, ok, e := o.positiveInt("max_tokens")
	if e != nil {
		return nil, nil, e
	}
	if !ok {
		return nil, nil, badf("max_tokens", "missing: Messages requires max_tokens")
	}
	c.Params["max_tokens"] = n
	if c.Stream, e = o.boolean("stream"); e != nil {
		return nil, nil, e
	}
	if e := o.passNumbers(c.Params, "temperature", "top_p", "top_k"); e != nil {
		return nil, nil, e
	}
	if o.has("stop_sequences") {
		var stop []string
		if err := json.Unmarshal(o["stop_sequences"], &stop); err != nil {
			return nil, nil, badf("stop_sequences", "must be an array of strings")
		}
		if len(stop) > 0 {
			c.Params["stop"] = stop
		}
	}
	if o.has("thinking") {
		var th struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(o["thinking"], &th)
		if th.Type != "disabled" {
			return nil, nil, badf("thinking", "extended thinking (type %q) is not supported by the gateway", th.Type)
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
			if typ, _ := to.str("type"); typ != "" && typ != "custom" {
				return nil, nil, badf(w+".type", "server tools (type %q) are not supported by the gateway; define client tools {name, description, input_schema}", typ)
			}
			name, _ := to.str("name")
			if name == "" {
				return nil, nil, badf(w+".name", "missing: a tool needs a name")
			}
			desc, e := to.str("description")
			if e != nil {
				e.Param = w + ".description"
				return nil, nil, e
			}
			c.Tools = append(c.Tools, chatTool(name, desc, t["input_schema"], nil))
		}
	}
	if o.has("tool_choice") {
		var tc struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(o["tool_choice"], &tc); err != nil {
			return nil, nil, badf("tool_choice", "must be an object {type}")
		}
		switch tc.Type {
		case "auto":
			c.Params["tool_choice"] = "auto"
		case "any":
			c.Params["tool_choice"] = "required"
		case "none":
			c.Params["tool_choice"] = "none"
		case "tool":
			if tc.Name == "" {
				return nil, nil, badf("tool_choice.name", "missing: tool_choice of type tool needs a name")
			}
			c.Params["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc.Name}}
		default:
			return nil, nil, badf("tool_choice.type", "unknown tool choice %q (want auto, any, tool or none)", tc.Type)
		}
		if tc.DisableParallelToolUse != nil {
			c.Params["parallel_tool_calls"] = !*tc.DisableParallelToolUse
		}
	}

	if o.has("system") {
		sys, e := textOf(o["system"], "system", "text")
		if e != nil {
			return nil, nil, e
		}
		c.Messages = append(c.Messages, pipeline.Message{Role: pipeline.RoleSystem, Content: sys})
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
		if role != "user" && role != "assistant" {
			return nil, nil, badf(w+".role", "unknown role %q (want user or assistant; the system prompt goes in system)", role)
		}
		var s string
		if json.Unmarshal(m["content"], &s) == nil {
			c.Messages = append(c.Messages, pipeline.Message{Role: role, Content: s})
			continue
		}
		var blocks []map[string]json.RawMessage
		if err := json.Unmarshal(m["content"], &blocks); err != nil {
			return nil, nil, badf(w+".content", "must be a string or an array of content blocks")
		}
		var texts []string
		var calls []pipeline.ToolCall
		var results []pipeline.Message
		for j, braw := range blocks {
			bw := fmt.Sprintf("%s.content[%d]", w, j)
			b := obj(braw)
			typ, _ := b.str("type")
			switch typ {
			case "text":
				t, e := b.str("text")
				if e != nil {
					e.Param = bw + ".text"
					return nil, nil, e
				}
				texts = append(texts, t)
			case "tool_use":
				if role != "assistant" {
					return nil, nil, badf(bw+".type", "tool_use blocks belong in assistant messages")
				}
				id, _ := b.str("id")
				name, _ := b.str("name")
				if id == "" {
					return nil, nil, badf(bw+".id", "missing: a tool_use block needs an id")
				}
				args := "{}"
				if b.has("input") {
					var buf bytes.Buffer
					if err := json.Compact(&buf, b["input"]); err == nil {
						args = buf.String()
					}
				}
				seen[id] = true
				calls = append(calls, pipeline.ToolCall{ID: id, Type: "function", Name: name, Arguments: args})
			case "tool_result":
				if role != "user" {
					return nil, nil, badf(bw+".type", "tool_result blocks belong in user messages")
				}
				id, _ := b.str("tool_use_id")
				if !seen[id] {
					return nil, nil, badf(bw+".tool_use_id", "no earlier tool_use has id %q", id)
				}
				out, e := textOf(b["content"], bw+".content", "text")
				if e != nil {
					return nil, nil, e
				}
				results = append(results, pipeline.Message{Role: pipeline.RoleTool, Content: out, ToolCallID: id})
			case "thinking", "redacted_thinking":
				// Earlier reasoning echoed back: not part of the
				// conversation the Model sees.
			case "image", "document":
				return nil, nil, badf(bw, "%s content is not supported by the gateway (images are not supported); send text only", typ)
			default:
				return nil, nil, badf(bw+".type", "content block type %q is not supported by the gateway (want text, tool_use or tool_result)", typ)
			}
		}
		c.Messages = append(c.Messages, results...)
		if role == "assistant" || len(texts) > 0 || len(results) == 0 {
			c.Messages = append(c.Messages, pipeline.Message{Role: role, Content: strings.Join(texts, "\n"), ToolCalls: calls})
		}
	}
	return c, &echo{Model: model, Raw: o}, nil
}

func (messagesCodec) parse(body []byte) (*Call, *echo, *reqError) { return parseMessages(body) }

// check refuses an answer whose tool call arguments are not a JSON
// object: a tool_use block's input must be one. The gateway does not
// guess what the model meant (502, api_error).
func (messagesCodec) check(a *Answer) *reqError {
	for i, tc := range a.Message.ToolCalls {
		if _, err := toolInput(tc.Arguments); err != nil {
			return &reqError{Status: http.StatusBadGateway, Msg: fmt.Sprintf("the model's tool call %d (%s) has arguments that are not a JSON object, which a tool_use block's input must be", i, tc.Name)}
		}
	}
	return nil
}

// toolInput is a tool call's arguments as a tool_use input: an empty
// string is {}.
func toolInput(args string) (json.RawMessage, error) {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}"), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, []byte(args))
	return buf.Bytes(), nil
}

func stopReason(a *Answer) (reason string, seq any) {
	switch {
	case len(a.Message.ToolCalls) > 0 || a.FinishReason == "tool_calls":
		return "tool_use", nil
	case a.FinishReason == "length":
		return "max_tokens", nil
	case a.StopSequence != "":
		return "stop_sequence", a.StopSequence
	}
	return "end_turn", nil
}

func messagesBlocks(a *Answer) []map[string]any {
	var out []map[string]any
	if a.Message.Content != "" || len(a.Message.ToolCalls) == 0 {
		out = append(out, map[string]any{"type": "text", "text": a.Message.Content})
	}
	for _, tc := range a.Message.ToolCalls {
		in, _ := toolInput(tc.Arguments) // check passed
		out = append(out, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": in})
	}
	return out
}

func (messagesCodec) render(req *echo, a *Answer, id *ids) any {
	reason, seq := stopReason(a)
	return map[string]any{
		"id": "msg_" + id.Resp, "type": "message", "role": "assistant", "model": req.Model,
		"content": messagesBlocks(a), "stop_reason": reason, "stop_sequence": seq,
		"usage": map[string]any{
			"input_tokens": a.PromptTokens, "output_tokens": a.CompletionTokens,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}
}

func (messagesCodec) stream(w *sse, req *echo, a *Answer, id *ids) {
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		w.event(typ, mustJSON(fields))
	}
	ev("message_start", map[string]any{"message": map[string]any{
		"id": "msg_" + id.Resp, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": a.PromptTokens, "output_tokens": 0,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}})
	for i, b := range messagesBlocks(a) {
		switch b["type"] {
		case "text":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range split(a.Message.Content) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			in, _ := b["input"].(json.RawMessage)
			for _, p := range split(string(in)) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		ev("content_block_stop", map[string]any{"index": i})
	}
	reason, seq := stopReason(a)
	ev("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]any{"output_tokens": a.CompletionTokens},
	})
	ev("message_stop", map[string]any{})
}
