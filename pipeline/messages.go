package pipeline

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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
//     joined with "\n" into Content; a list that holds an image part
//     ({type: image_url, image_url: {url}}, or input_image) is also kept
//     whole in Parts;
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
	if msg.Content, msg.Parts, err = content(m["content"], where+".content"); err != nil {
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

// contentText reads message content that may hold only text: a string,
// null, or a list of text content parts joined with "\n".
func contentText(v any, where string) (string, error) {
	text, parts, err := content(v, where)
	if err == nil && parts != nil {
		err = fmt.Errorf("%s: image parts are not allowed here (only text parts)", where)
	}
	return text, err
}

// DecodeContent reads a decoded JSON message content: a string, null, or
// a list of content parts, as DecodeMessages reads a message's content.
// name is the content's place and prefixes every error.
func DecodeContent(v any, name string) (text string, parts []ContentPart, err error) {
	return content(v, name)
}

// content reads message content: a string, null, or a list of content
// parts. The texts of the text parts are joined with "\n" into text;
// parts is every part, in order, when one is an image (nil otherwise).
// Image parts are OpenAI's {type: image_url, image_url: {url}} (or
// image_url: URL) and the Responses API's {type: input_image, image_url:
// URL}; the URL must be a base64 data URL of an image/* type or an
// http(s) URL.
func content(v any, where string) (text string, parts []ContentPart, err error) {
	switch x := v.(type) {
	case nil:
		return "", nil, nil
	case string:
		return x, nil, nil
	case []any:
		var b strings.Builder
		all := make([]ContentPart, 0, len(x))
		images := false
		for i, p := range x {
			pw := fmt.Sprintf("%s[%d]", where, i)
			var part ContentPart
			pm, ok := p.(map[string]any)
			switch {
			case !ok:
				s, ok := p.(string) // a bare string part
				if !ok {
					return "", nil, fmt.Errorf("%s: want a content part object, got %s", pw, JSONKind(p))
				}
				part = ContentPart{Type: PartText, Text: s}
			default:
				typ, err := optString(pm, "type", pw)
				if err != nil {
					return "", nil, err
				}
				switch typ {
				case "text", "input_text", "output_text", "":
					t, err := reqString(pm, "text", pw)
					if err != nil {
						return "", nil, err
					}
					part = ContentPart{Type: PartText, Text: t}
				case "image_url", "input_image":
					u, err := imageURL(pm, pw)
					if err != nil {
						return "", nil, err
					}
					part = ContentPart{Type: PartImage, ImageURL: u}
					images = true
				default:
					return "", nil, fmt.Errorf("%s: unsupported content part type %q (want text or image_url)", pw, typ)
				}
			}
			if part.Type == PartText {
				if b.Len() > 0 || i > 0 && hasText(all) {
					b.WriteByte('\n')
				}
				b.WriteString(part.Text)
			}
			all = append(all, part)
		}
		if !images {
			return b.String(), nil, nil
		}
		return b.String(), all, nil
	default:
		return "", nil, fmt.Errorf("%s: want a string or a list of content parts, got %s", where, JSONKind(v))
	}
}

func hasText(parts []ContentPart) bool {
	for _, p := range parts {
		if p.Type == PartText {
			return true
		}
	}
	return false
}

// imageURL reads an image part's URL: image_url as a string or as an
// object {url, detail}.
func imageURL(pm map[string]any, where string) (string, error) {
	var u string
	switch x := pm["image_url"].(type) {
	case string:
		u = x
	case map[string]any:
		var err error
		if u, err = reqString(x, "url", where+".image_url"); err != nil {
			return "", err
		}
	case nil:
		return "", fmt.Errorf("%s: missing \"image_url\"", where)
	default:
		return "", fmt.Errorf("%s.image_url: want an object {url} or a string, got %s", where, JSONKind(x))
	}
	if err := CheckImageURL(u); err != nil {
		return "", fmt.Errorf("%s.image_url: %w", where, err)
	}
	return u, nil
}

// CheckImageURL reports whether u is an image URL trajflow sends: a base64
// data URL of an image/* media type whose payload decodes, or an http(s)
// URL with a host.
func CheckImageURL(u string) error {
	if strings.HasPrefix(u, "data:") {
		_, _, err := ParseDataURL(u)
		return err
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("want a data:image/...;base64, URL or an http(s) URL, got %q", clip(u, 40))
	}
	return nil
}

// ParseDataURL splits a base64 data URL of an image into its media type
// and its decoded bytes.
func ParseDataURL(u string) (mime string, data []byte, err error) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", nil, fmt.Errorf("not a data URL: %q", clip(u, 40))
	}
	head, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return "", nil, errors.New("data URL without a comma")
	}
	mime, ok = strings.CutSuffix(head, ";base64")
	if !ok {
		return "", nil, fmt.Errorf("data URL %q is not base64 (want data:image/TYPE;base64,...)", clip(head, 40))
	}
	if !strings.HasPrefix(mime, "image/") || len(mime) == len("image/") || strings.ContainsAny(mime, ";, ") {
		return "", nil, fmt.Errorf("data URL media type %q is not an image type (want image/png, image/jpeg, ...)", clip(mime, 40))
	}
	data, err = base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", nil, fmt.Errorf("data URL payload: %w", err)
	}
	if len(data) == 0 {
		return "", nil, errors.New("data URL holds no bytes")
	}
	return mime, data, nil
}

// clip shortens s to n bytes for an error (data URLs are long).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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

// ChatPart is a content part as OpenAI's chat API takes it:
// {type: text, text} or {type: image_url, image_url: {url}}.
type ChatPart struct {
	Type     string        `json:"type"`
	Text     *string       `json:"text,omitempty"`
	ImageURL *ChatImageURL `json:"image_url,omitempty"`
}

// ChatImageURL is a ChatPart's image.
type ChatImageURL struct {
	URL string `json:"url"`
}

// ChatParts encodes parts as OpenAI chat content parts, the shape
// DecodeContent reads back.
func ChatParts(parts []ContentPart) []ChatPart {
	out := make([]ChatPart, len(parts))
	for i, p := range parts {
		if p.Type == PartImage {
			out[i] = ChatPart{Type: PartImage, ImageURL: &ChatImageURL{URL: p.ImageURL}}
		} else {
			t := p.Text
			out[i] = ChatPart{Type: PartText, Text: &t}
		}
	}
	return out
}
