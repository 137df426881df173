package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Template renders prompt messages. It is immutable after New and safe for
// concurrent use.
type Template struct {
	system, user  []segment // nil when not set
	messagesField string
	override      bool
}

// segment is literal text or a placeholder.
type segment struct {
	lit    string
	field  string   // placeholder's field as written (trimmed); "" for literal text
	path   []string // field split on "."
	format string   // "" (plain) or FormatJSON
}

// FormatJSON is the placeholder format that inserts a value as compact
// JSON: {field:json}. It is the only way to insert an object or a list.
const FormatJSON = "json"

// FieldError is a placeholder whose field the row does not have.
type FieldError struct {
	// Row names the row ("tasks.jsonl:5").
	Row string
	// Field is the placeholder's field ("question", "meta.id").
	Field string
	// Key is the template's config key ("prompt.user").
	Key string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: row has no field %q", e.Row, e.Key, e.Field)
}

// New parses the prompt config's templates once. Errors name the key
// relative to the prompt section (system, user) as *pipeline.KeyError.
func New(cfg Config) (*Template, error) {
	t := &Template{messagesField: cfg.MessagesField, override: cfg.OverrideRowInput}
	if t.messagesField == "" {
		t.messagesField = "messages"
	}
	var errs []error
	if cfg.User != "" {
		segs, err := parse(cfg.User, "user")
		if err != nil {
			errs = append(errs, err)
		}
		t.user = segs
	}
	if cfg.System != "" {
		if cfg.User == "" {
			errs = append(errs, &pipeline.KeyError{Key: "user", Msg: "required when system is set"})
		}
		segs, err := parse(cfg.System, "system")
		if err != nil {
			errs = append(errs, err)
		}
		t.system = segs
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// parse splits a template into literal text and placeholders.
func parse(s, key string) ([]segment, error) {
	segs := []segment{}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			segs = append(segs, segment{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '{':
			if i+1 < len(s) && s[i+1] == '{' {
				lit.WriteByte('{')
				i += 2
				continue
			}
			j := strings.IndexAny(s[i+1:], "{}")
			if j < 0 {
				return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("unterminated { at byte %d (write {{ for a literal brace)", i)}
			}
			j += i + 1
			if s[j] == '{' {
				return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("{ inside the placeholder at byte %d (write {{ for a literal brace)", i)}
			}
			name := strings.TrimSpace(s[i+1 : j])
			if name == "" {
				return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("empty placeholder {} at byte %d (write {{}} for literal braces)", i)}
			}
			var form string
			if k := strings.LastIndexByte(name, ':'); k >= 0 {
				name, form = strings.TrimSpace(name[:k]), strings.TrimSpace(name[k+1:])
				if form != FormatJSON {
					return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("placeholder {%s} at byte %d: unknown format %q (want {field:json})", s[i+1:j], i, form)}
				}
				if name == "" {
					return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("placeholder {%s} at byte %d: no field before the format", s[i+1:j], i)}
				}
			}
			path := strings.Split(name, ".")
			for _, p := range path {
				if p == "" {
					return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("placeholder {%s} at byte %d: empty name between dots", name, i)}
				}
			}
			flush()
			segs = append(segs, segment{field: name, path: path, format: form})
			i = j + 1
		case '}':
			if i+1 < len(s) && s[i+1] == '}' {
				lit.WriteByte('}')
				i += 2
				continue
			}
			return nil, &pipeline.KeyError{Key: key, Msg: fmt.Sprintf("single } at byte %d (write }} for a literal brace)", i)}
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return segs, nil
}

// Enabled reports whether the config has a user template. When it has
// none, Render takes the row's own messages.
func (t *Template) Enabled() bool { return t.user != nil }

// Render sets task.Messages. With templates it renders the system message
// (when set) and the user message from the task's fields; a missing field
// is a *FieldError, and a row that carries its own input is an error
// unless the config sets override_row_input. Without templates, the task
// keeps its own messages (read from prompt.messages_field when that is not
// "messages"), and a task without any is an error naming the row.
func (t *Template) Render(task *pipeline.Task) error {
	if !t.Enabled() {
		return t.ownMessages(task)
	}
	if field := t.rowInput(task); field != "" && !t.override {
		return fmt.Errorf("%s: prompt.user is set and the row carries its own input (%s): "+
			"set prompt.override_row_input: true to replace the row's input with the template, or leave prompt.user out to use the row's", task.Source, field)
	}
	msgs := make([]pipeline.Message, 0, 2)
	if t.system != nil {
		system, err := t.render(t.system, task, "prompt.system")
		if err != nil {
			return err
		}
		msgs = append(msgs, pipeline.Message{Role: pipeline.RoleSystem, Content: system})
	}
	user, err := t.render(t.user, task, "prompt.user")
	if err != nil {
		return err
	}
	task.Messages = append(msgs, pipeline.Message{Role: pipeline.RoleUser, Content: user})
	return nil
}

// rowInput names the field holding the row's own input ("" when it has
// none): NeMo Gym's responses_create_params.input, or the messages field.
func (t *Template) rowInput(task *pipeline.Task) string {
	if _, ok := task.Fields["responses_create_params"]; ok && len(task.Messages) > 0 {
		return "responses_create_params.input"
	}
	if len(task.Messages) > 0 {
		return "messages"
	}
	if v, ok := task.Fields[t.messagesField]; ok && v != nil {
		if l, isList := v.([]any); !isList || len(l) > 0 {
			return t.messagesField
		}
	}
	return ""
}

func (t *Template) ownMessages(task *pipeline.Task) error {
	if t.messagesField != "messages" {
		if v, ok := task.Fields[t.messagesField]; ok && v != nil {
			msgs, err := pipeline.DecodeMessages(v, t.messagesField)
			if err != nil {
				return fmt.Errorf("%s: prompt.messages_field: %w", task.Source, err)
			}
			if len(msgs) > 0 {
				task.Messages = msgs
			}
		}
	}
	if len(task.Messages) == 0 {
		return fmt.Errorf("%s: row has no messages: set prompt.user to render them from the row's fields, "+
			"or give rows a %q field (prompt.messages_field) or responses_create_params.input", task.Source, t.messagesField)
	}
	return nil
}

// render fills one template from the task's fields.
func (t *Template) render(segs []segment, task *pipeline.Task, key string) (string, error) {
	var b strings.Builder
	for _, s := range segs {
		if s.field == "" {
			b.WriteString(s.lit)
			continue
		}
		v, ok := lookup(task.Fields, s)
		if !ok {
			return "", &FieldError{Row: task.Source, Field: s.field, Key: key}
		}
		if s.format == "" {
			switch v.(type) {
			case map[string]any:
				return "", fmt.Errorf("%s: %s: field %q is an object: write {%s:json} to insert it as JSON, or {%s.KEY} for one of its fields", task.Source, key, s.field, s.field, s.field)
			case []any:
				return "", fmt.Errorf("%s: %s: field %q is a list: write {%s:json} to insert it as JSON, or {%s.0} for its first element", task.Source, key, s.field, s.field, s.field)
			}
		}
		text, err := format(v, task.Raw, s)
		if err != nil {
			return "", fmt.Errorf("%s: %s: field %q: %w", task.Source, key, s.field, err)
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// lookup finds a placeholder's value: a top-level field named exactly as
// written first (names may hold dots), else the dotted path.
func lookup(fields map[string]any, s segment) (any, bool) {
	if v, ok := fields[s.field]; ok {
		return v, true
	}
	if len(s.path) == 1 {
		return nil, false
	}
	var cur any = fields
	for _, p := range s.path {
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[p]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// format writes a value into a prompt: strings as they are (as a JSON
// string under {field:json}), numbers, true, false and null as written.
// Objects and lists (only under {field:json}) are compact JSON taken from
// the raw row when it has them, so keys keep their order and numbers their
// text.
func format(v any, raw json.RawMessage, s segment) (string, error) {
	switch x := v.(type) {
	case string:
		if s.format == FormatJSON {
			break
		}
		return x, nil
	case json.Number:
		return x.String(), nil
	case nil:
		return "null", nil
	case bool:
		return strconv.FormatBool(x), nil
	case map[string]any, []any:
		if sub, ok := rawAt(raw, s); ok {
			var buf bytes.Buffer
			if err := json.Compact(&buf, sub); err == nil {
				return buf.String(), nil
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// rawAt finds the JSON text of a placeholder's value in the raw row.
func rawAt(raw json.RawMessage, s segment) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return nil, false
	}
	if v, ok := top[s.field]; ok {
		return v, true
	}
	cur := json.RawMessage(raw)
	for _, p := range s.path {
		cur = bytes.TrimSpace(cur)
		if len(cur) == 0 {
			return nil, false
		}
		switch cur[0] {
		case '{':
			var m map[string]json.RawMessage
			if json.Unmarshal(cur, &m) != nil {
				return nil, false
			}
			v, ok := m[p]
			if !ok {
				return nil, false
			}
			cur = v
		case '[':
			var l []json.RawMessage
			i, err := strconv.Atoi(p)
			if json.Unmarshal(cur, &l) != nil || err != nil || i < 0 || i >= len(l) {
				return nil, false
			}
			cur = l[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
