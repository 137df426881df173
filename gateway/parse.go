package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// obj is a JSON object decoded one level: its fields' raw JSON.
type obj map[string]json.RawMessage

// decodeObj decodes a request body that must be one JSON object.
func decodeObj(body []byte) (obj, *reqError) {
	var o obj
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, badf("", "the body is not valid JSON: %v", err)
	}
	if o == nil {
		return nil, badf("", "the body is not a JSON object")
	}
	return o, nil
}

// has says whether field k is present and not null.
func (o obj) has(k string) bool {
	v, ok := o[k]
	return ok && !isNull(v)
}

func isNull(v json.RawMessage) bool {
	return len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null"
}

// str is the string field k ("" when absent or null).
func (o obj) str(k string) (string, *reqError) {
	if !o.has(k) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(o[k], &s); err != nil {
		return "", badf(k, "must be a string")
	}
	return s, nil
}

// boolean is the boolean field k (false when absent or null).
func (o obj) boolean(k string) (bool, *reqError) {
	if !o.has(k) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(o[k], &b); err != nil {
		return false, badf(k, "must be true or false")
	}
	return b, nil
}

// number is the numeric field k; ok is false when absent or null.
func (o obj) number(k string) (v float64, ok bool, e *reqError) {
	if !o.has(k) {
		return 0, false, nil
	}
	if err := json.Unmarshal(o[k], &v); err != nil {
		return 0, false, badf(k, "must be a number")
	}
	return v, true, nil
}

// positiveInt is the field k, which must be a positive integer when
// present.
func (o obj) positiveInt(k string) (n int, ok bool, e *reqError) {
	v, ok, e := o.number(k)
	if e != nil || !ok {
		if e != nil {
			e.Msg = "must be a positive integer"
		}
		return 0, ok, e
	}
	if v != math.Trunc(v) || v < 1 || v > math.MaxInt32 {
		return 0, false, badf(k, "must be a positive integer, not %s", strings.TrimSpace(string(o[k])))
	}
	return int(v), true, nil
}

// any is field k decoded into a Go value (nil when absent or null).
func (o obj) any(k string) any {
	if !o.has(k) {
		return nil
	}
	var v any
	_ = json.Unmarshal(o[k], &v) // o[k] came out of a valid document
	return v
}

// passNumbers copies the numeric fields named into params under the
// same names, checking they are numbers.
func (o obj) passNumbers(params map[string]any, names ...string) *reqError {
	for _, k := range names {
		v, ok, e := o.number(k)
		if e != nil {
			return e
		}
		if ok {
			params[k] = v
		}
	}
	return nil
}

// refuseUnsupported refuses the fields that are present, not null and
// not "off" (false, 0, {} or []): the gateway cannot honour them.
func (o obj) refuseUnsupported(why map[string]string) *reqError {
	for _, k := range sortedKeys(why) {
		if !o.has(k) || isOff(o[k]) {
			continue
		}
		return badf(k, "is not supported by the gateway: %s", why[k])
	}
	return nil
}

func isOff(v json.RawMessage) bool {
	switch strings.Join(strings.Fields(string(v)), "") {
	case "false", "0", "{}", "[]", `""`:
		return true
	}
	return false
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// textOf is the text of a content that is a string, null, or an array
// of parts whose text parts (types in textTypes) are joined with "\n".
// Image, audio and file parts are refused: the gateway passes text only.
func textOf(raw json.RawMessage, where string, textTypes ...string) (string, *reqError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badf(where, "must be a string or an array of content parts")
	}
	var texts []string
	for j, p := range parts {
		pw := fmt.Sprintf("%s[%d]", where, j)
		po := obj(p)
		typ, e := po.str("type")
		if e != nil {
			e.Param = pw + ".type"
			return "", e
		}
		switch {
		case contains(textTypes, typ):
			t, e := po.str("text")
			if e != nil {
				e.Param = pw + ".text"
				return "", e
			}
			texts = append(texts, t)
		case strings.Contains(typ, "image"):
			return "", badf(pw, "images are not supported by the gateway (content part type %q); send text only", typ)
		case strings.Contains(typ, "audio"), strings.Contains(typ, "file"), typ == "document":
			return "", badf(pw, "content part type %q is not supported by the gateway; send text only", typ)
		default:
			return "", badf(pw+".type", "unknown content part type %q (want one of %s)", typ, strings.Join(textTypes, ", "))
		}
	}
	return strings.Join(texts, "\n"), nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// chatTool is a tool in Chat Completions' form.
func chatTool(name, description string, parameters json.RawMessage, strict json.RawMessage) json.RawMessage {
	// Chat Completions' order of keys, as an agent writes them: a
	// template that renders the tools as JSON renders them in this order.
	type function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      json.RawMessage `json:"strict,omitempty"`
	}
	fn := function{Name: name, Description: description}
	if !isNull(parameters) {
		fn.Parameters = parameters
	}
	if !isNull(strict) {
		fn.Strict = strict
	}
	return mustJSON(struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}{"function", fn})
}
