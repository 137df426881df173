package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// task builds a task from a JSON row as the source would.
func task(t testing.TB, row string) *pipeline.Task {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(row))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	json.Compact(&raw, []byte(row))
	return &pipeline.Task{Source: "tasks.jsonl:5", Raw: raw.Bytes(), Fields: fields}
}

const row = `{"question": "2+2?", "n": 1.50, "ok": true, "none": null,
	"meta": {"z": 1, "a": {"id": "x7"}, "tags": ["p", "q"]}, "list": [3, {"k": "v"}],
	"dotted.name": "flat"}`

func TestRender(t *testing.T) {
	tests := []struct {
		name, tmpl, want string
	}{
		{"field", "Solve: {question}", "Solve: 2+2?"},
		{"no placeholder", "plain text", "plain text"},
		{"number as written", "n={n}", "n=1.50"},
		{"bool and null", "{ok} {none}", "true null"},
		{"spaces in the braces", "{ question }", "2+2?"},
		{"dotted path", "id={meta.a.id}", "id=x7"},
		{"list index", "{meta.tags.1} {list.1.k}", "q v"},
		{"field with a dot in its name", "{dotted.name}", "flat"},
		{"object as JSON keeps key order", "{meta:json}", `{"z":1,"a":{"id":"x7"},"tags":["p","q"]}`},
		{"nested list as JSON", "{meta.tags:json}", `["p","q"]`},
		{"string as JSON", "{ question : json }", `"2+2?"`},
		{"number as JSON", "{n:json} {ok:json} {none:json}", `1.50 true null`},
		{"escaped braces", "{{\"answer\": {question}}}", `{"answer": 2+2?}`},
		{"adjacent", "{question}{question}", "2+2?2+2?"},
		{"unicode", "é {question} ✓", "é 2+2? ✓"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := New(Config{User: tt.tmpl})
			if err != nil {
				t.Fatal(err)
			}
			tk := task(t, row)
			if err := tp.Render(tk); err != nil {
				t.Fatal(err)
			}
			want := []pipeline.Message{{Role: "user", Content: tt.want}}
			if !reflect.DeepEqual(tk.Messages, want) {
				t.Errorf("messages = %+v, want %+v", tk.Messages, want)
			}
		})
	}
}

// A placeholder on an object or a list is an error unless a format is
// asked for: pasting JSON into a prompt is seldom what a template meant.
func TestObjectNeedsFormat(t *testing.T) {
	for _, tt := range []struct{ tmpl, want string }{
		{"{meta}", `tasks.jsonl:5: prompt.user: field "meta" is an object: write {meta:json}`},
		{"{meta.tags}", `tasks.jsonl:5: prompt.user: field "meta.tags" is a list: write {meta.tags:json}`},
		{"{list}", `field "list" is a list`},
	} {
		tp, err := New(Config{User: tt.tmpl})
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Render(task(t, row)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.tmpl, err, tt.want)
		}
	}
}

// A template meeting a row that carries its own input is an error naming
// both, unless override_row_input is set.
func TestTemplateAndRowInput(t *testing.T) {
	tests := []struct {
		name, row string
		override  bool
		want      string // "" : renders
	}{
		{"plain row", `{"question": "q", "meta": {"a": 1}}`, false, ""},
		{"messages field", `{"question": "q", "messages": [{"role": "user", "content": "hi"}]}`, false,
			"tasks.jsonl:5: prompt.user is set and the row carries its own input (messages): set prompt.override_row_input: true"},
		{"nemo gym input", `{"question": "q", "responses_create_params": {"input": "hi"}}`, false,
			"the row carries its own input (responses_create_params.input)"},
		{"nemo gym overridden", `{"question": "q", "responses_create_params": {"input": "hi"}}`, true, ""},
		{"empty messages", `{"question": "q", "messages": []}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := New(Config{User: "{question}", OverrideRowInput: tt.override})
			if err != nil {
				t.Fatal(err)
			}
			tk := task(t, tt.row)
			if _, ok := tk.Fields["messages"]; ok || tk.Fields["responses_create_params"] != nil {
				if l, _ := tk.Fields["messages"].([]any); len(l) > 0 || tk.Fields["responses_create_params"] != nil {
					tk.Messages = []pipeline.Message{{Role: "user", Content: "hi"}}
				}
			}
			err = tp.Render(tk)
			if tt.want == "" {
				if err != nil || tk.Messages[len(tk.Messages)-1].Content != "q" {
					t.Fatalf("err %v, messages %+v", err, tk.Messages)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestRenderSystemAndReplacesRowMessages(t *testing.T) {
	tp, err := New(Config{System: "You solve {meta.a.id} problems.", User: "{question}", OverrideRowInput: true})
	if err != nil {
		t.Fatal(err)
	}
	tk := task(t, row)
	tk.Messages = []pipeline.Message{{Role: "user", Content: "old"}}
	if err := tp.Render(tk); err != nil {
		t.Fatal(err)
	}
	want := []pipeline.Message{{Role: "system", Content: "You solve x7 problems."}, {Role: "user", Content: "2+2?"}}
	if !reflect.DeepEqual(tk.Messages, want) {
		t.Errorf("messages = %+v, want %+v", tk.Messages, want)
	}
}

func TestMissingField(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
		key   string
	}{
		{Config{User: "Q: {question} {answer}"}, "answer", "prompt.user"},
		{Config{System: "{persona}", User: "{question}"}, "persona", "prompt.system"},
		{Config{User: "{meta.a.name}"}, "meta.a.name", "prompt.user"},
		{Config{User: "{meta.tags.2}"}, "meta.tags.2", "prompt.user"},
		{Config{User: "{question.x}"}, "question.x", "prompt.user"},
	}
	for _, tt := range tests {
		tp, err := New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = tp.Render(task(t, row))
		var fe *FieldError
		if !errors.As(err, &fe) || *fe != (FieldError{Row: "tasks.jsonl:5", Field: tt.field, Key: tt.key}) {
			t.Errorf("%+v: err = %#v", tt.cfg, err)
			continue
		}
		want := "tasks.jsonl:5: " + tt.key + ": row has no field \"" + tt.field + "\""
		if err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{User: "Solve {question"}, "user: unterminated { at byte 6 (write {{ for a literal brace)"},
		{Config{User: "ok", System: "a } b"}, "system: single } at byte 2 (write }} for a literal brace)"},
		{Config{User: "{}"}, "user: empty placeholder {} at byte 0 (write {{}} for literal braces)"},
		{Config{User: "{a{b}}"}, "user: { inside the placeholder at byte 0 (write {{ for a literal brace)"},
		{Config{User: "{a..b}"}, "user: placeholder {a..b} at byte 0: empty name between dots"},
		{Config{System: "hi"}, "user: required when system is set"},
		{Config{User: "{meta:yaml}"}, `user: placeholder {meta:yaml} at byte 0: unknown format "yaml" (want {field:json})`},
		{Config{User: "x {:json}"}, "user: placeholder {:json} at byte 2: no field before the format"},
		{Config{User: "{", System: "}"}, "user: unterminated { at byte 0 (write {{ for a literal brace)\nsystem: single } at byte 0 (write }} for a literal brace)"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%+v: err = %v\nwant %s", tt.cfg, err, tt.want)
		}
	}
}

func TestNotEnabled(t *testing.T) {
	msgs := []pipeline.Message{{Role: "user", Content: "hi"}}
	tests := []struct {
		name    string
		cfg     Config
		row     string
		preset  []pipeline.Message
		want    []pipeline.Message
		wantErr string
	}{
		{"row messages kept", Config{MessagesField: "messages"}, `{"a": 1}`, msgs, msgs, ""},
		{"no messages", Config{MessagesField: "messages"}, `{"a": 1}`, nil, nil,
			`tasks.jsonl:5: row has no messages: set prompt.user to render them from the row's fields, or give rows a "messages" field (prompt.messages_field) or responses_create_params.input`},
		{"messages field", Config{MessagesField: "chat"}, `{"chat": [{"role": "user", "content": "from chat"}]}`, nil,
			[]pipeline.Message{{Role: "user", Content: "from chat"}}, ""},
		{"messages field over row messages", Config{MessagesField: "chat"}, `{"chat": "text"}`, msgs,
			[]pipeline.Message{{Role: "user", Content: "text"}}, ""},
		{"messages field absent keeps row messages", Config{MessagesField: "chat"}, `{}`, msgs, msgs, ""},
		{"bad messages field", Config{MessagesField: "chat"}, `{"chat": 3}`, nil, nil,
			"tasks.jsonl:5: prompt.messages_field: chat: want a list of messages or a string, got a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tp.Enabled() {
				t.Fatal("enabled without prompt.user")
			}
			tk := task(t, tt.row)
			tk.Messages = tt.preset
			err = tp.Render(tk)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tk.Messages, tt.want) {
				t.Errorf("messages = %+v, want %+v", tk.Messages, tt.want)
			}
		})
	}
}

// FuzzTemplate renders arbitrary templates over arbitrary JSON rows: no
// panic, and errors are either config errors or name the row.
func FuzzTemplate(f *testing.F) {
	f.Add("Solve: {question}", row)
	f.Add("{{literal}} {meta.a.id} {list.1}", row)
	f.Add("{a.b.c", `{"a": {"b": [1, 2]}}`)
	f.Add("}{", `[]`)
	f.Add("{x.99999999999999999999}", `{"x": [1]}`)
	f.Add("{meta:json} {a : json} {b:}", row)
	f.Fuzz(func(t *testing.T, tmpl, rowJSON string) {
		tp, err := New(Config{User: tmpl, System: tmpl})
		if err != nil {
			var ke *pipeline.KeyError
			if !errors.As(err, &ke) || (ke.Key != "user" && ke.Key != "system") {
				t.Errorf("config error does not name its key: %v", err)
			}
			return
		}
		dec := json.NewDecoder(strings.NewReader(rowJSON))
		dec.UseNumber()
		var fields map[string]any
		if dec.Decode(&fields) != nil {
			fields = map[string]any{}
		}
		tk := &pipeline.Task{Source: "f.jsonl:1", Raw: json.RawMessage(rowJSON), Fields: fields}
		if err := tp.Render(tk); err != nil {
			if !strings.HasPrefix(err.Error(), "f.jsonl:1: ") {
				t.Errorf("render error does not name the row: %v", err)
			}
			return
		}
		if tp.Enabled() && (len(tk.Messages) != 2 || tk.Messages[0].Content != tk.Messages[1].Content) {
			t.Errorf("messages = %+v", tk.Messages)
		}
	})
}
