package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// roles are the message roles a row may use.
var roles = map[string]bool{
	RoleSystem:    true,
	"developer":   true,
	RoleUser:      true,
	RoleAssistant: true,
	RoleTool:      true,
}

// DecodeMessages converts a decoded JSON value holding messages into
// trajflow messages. name is the value's place in the row
// ("messages", "responses_create_params.input") and prefixes every error.
//
// It accepts:
//   - a string: one user message;
//   - a list of OpenAI chat messages ({role, content, tool_calls,
//     tool_call_id, name}); content is a string, null, or a list of content
//     parts whose texts ({type: text|input_text|output_text, text}) are
//     joined with "\n";
//   - OpenAI Responses API input items: messages (with or without
//     type: message), function_call items (folded into an assistant
//     message's tool calls) and function_call_output items (tool messages);
//     reasoning items are dropped.
//
// Every message gets Turn 0 (the prompt). An empty list gives no messages.
func DecodeMessages(v any, name string) ([]Message, error) {
	switch x := v.(type) {
	case string:
		return []Message{{Role: RoleUser, Content: x}}, nil
	case []any:
		var out []Message
		for i, item := range x {
			where := fmt.Sprintf("%s[%d]", name, i)
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: want a message object, got %s", where, JSONKind(item))
			}
			var err error
			out, err = appendItem(out, m, where)
			if err != nil {
				return nil, err
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%s: want a list of messages or a string, got %s", name, JSONKind(v))
	}
}

// appendItem appends one chat message or Responses API input item.
func appendItem(out []Message, m map[string]any, where string) ([]Message, error) {
	typ, err := optString(m, "type", where)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "", "message":
		msg, err := decodeMessage(m, where)
		if err != nil {
			return nil, err
		}
		return append(out, msg), nil
	case "function_call":
		id, err := optString(m, "call_id", where)
		if err != nil {
			return nil, err
		}
		fn, err := reqString(m, "name", where)
		if err != nil {
			return nil, err
		}
		args, err := arguments(m["arguments"], where+".arguments")
		if err != nil {
			return nil, err
		}
		call := ToolCall{ID: id, Type: "function", Name: fn, Arguments: args}
		if n := len(out); n > 0 && out[n-1].Role == RoleAssistant {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
			return out, nil
		}
		return append(out, Message{Role: RoleAssistant, ToolCalls: []ToolCall{call}}), nil
	case "function_call_output":
		id, err := optString(m, "call_id", where)
		if err != nil {
			return nil, err
		}
		content, err := contentText(m["output"], where+".output")
		if err != nil {
			return nil, err
		}
		return append(out, Message{Role: RoleTool, Content: content, ToolCallID: id}), nil
	case "reasoning":
		return out, nil
	default:
		return nil, fmt.Errorf("%s: unsupported item type %q (want message, function_call, function_call_output)", where, typ)
	}
}

// decodeMessage reads one OpenAI chat message.
func decodeMessage(m map[string]any, where string) (Message, error) {
	var msg Message
	role, err := reqString(m, "role", where)
	if err != nil {
		return msg, err
	}
	if !roles[role] {
		return msg, fmt.Errorf("%s.role: unknown role %q (want system, developer, user, assistant or tool)", where, role)
	}
	msg.Role = role
	if msg.Content, err = contentText(m["content"], where+".content"); err != nil {
		return msg, err
	}
	if msg.ToolCallID, err = optString(m, "tool_call_id", where); err != nil {
		return msg, err
	}
	if msg.Name, err = optString(m, "name", where); err != nil {
		return msg, err
	}
	if tc, ok := m["tool_calls"]; ok && tc != nil {
		list, ok := tc.([]any)
		if !ok {
			return msg, fmt.Errorf("%s.tool_calls: want a list, got %s", where, JSONKind(tc))
		}
		for i, c := range list {
			call, err := decodeToolCall(c, fmt.Sprintf("%s.tool_calls[%d]", where, i))
			if err != nil {
				return msg, err
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
	}
	return msg, nil
}

// decodeToolCall reads {id, type, function: {name, arguments}}.
func decodeToolCall(v any, where string) (ToolCall, error) {
	var call ToolCall
	m, ok := v.(map[string]any)
	if !ok {
		return call, fmt.Errorf("%s: want an object, got %s", where, JSONKind(v))
	}
	var err error
	if call.ID, err = optString(m, "id", where); err != nil {
		return call, err
	}
	if call.Type, err = optString(m, "type", where); err != nil {
		return call, err
	}
	if call.Type == "" {
		call.Type = "function"
	}
	fv, ok := m["function"].(map[string]any)
	if !ok {
		return call, fmt.Errorf("%s.function: want an object with name and arguments, got %s", where, JSONKind(m["function"]))
	}
	if call.Name, err = reqString(fv, "name", where+".function"); err != nil {
		return call, err
	}
	if call.Arguments, err = arguments(fv["arguments"], where+".function.arguments"); err != nil {
		return call, err
	}
	return call, nil
}

// arguments reads tool-call arguments: a JSON string as is, an object as
// compact JSON, nothing as "".
func arguments(v any, where string) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case map[string]any:
		return compactJSON(x)
	default:
		return "", fmt.Errorf("%s: want a string or an object, got %s", where, JSONKind(v))
	}
}

// contentText reads message content: a string, null, or a list of text
// content parts joined with "\n".
func contentText(v any, where string) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []any:
		var b strings.Builder
		for i, p := range x {
			pw := fmt.Sprintf("%s[%d]", where, i)
			pm, ok := p.(map[string]any)
			if !ok {
				if s, ok := p.(string); ok { // a bare string part
					if i > 0 {
						b.WriteByte('\n')
					}
					b.WriteString(s)
					continue
				}
				return "", fmt.Errorf("%s: want a content part object, got %s", pw, JSONKind(p))
			}
			typ, err := optString(pm, "type", pw)
			if err != nil {
				return "", err
			}
			switch typ {
			case "text", "input_text", "output_text", "":
			default:
				return "", fmt.Errorf("%s: unsupported content part type %q (only text parts)", pw, typ)
			}
			text, err := reqString(pm, "text", pw)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(text)
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("%s: want a string or a list of content parts, got %s", where, JSONKind(v))
	}
}

func reqString(m map[string]any, key, where string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", fmt.Errorf("%s: missing %q", where, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s.%s: want a string, got %s", where, key, JSONKind(v))
	}
	return s, nil
}

func optString(m map[string]any, key, where string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s.%s: want a string, got %s", where, key, JSONKind(v))
	}
	return s, nil
}

// JSONKind names a decoded JSON value's kind for errors ("a string",
// "an object", ...).
func JSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64, int64, int, int32, float32:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// compactJSON marshals v without HTML escaping and without a trailing
// newline. Object keys come out sorted.
func compactJSON(v any) (string, error) {
	b, err := MarshalJSON(v)
	return string(b), err
}

// MarshalJSON marshals v without HTML escaping and without a trailing
// newline. Object keys come out sorted.
func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
