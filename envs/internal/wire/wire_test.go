package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestDecode(t *testing.T) {
	cases := []struct {
		in      string
		wantErr string
		check   func(*testing.T, *Response)
	}{
		{in: `{"observations":[{"content":"x"}]}`, check: func(t *testing.T, r *Response) {
			if r.Observations[0].Role != "user" {
				t.Errorf("default role = %q", r.Observations[0].Role)
			}
			if r.Step("prev").State != "prev" {
				t.Error("absent state did not keep the previous one")
			}
		}},
		{in: `{"observations":[{"role":"environment","content":"x"}]}`, check: func(t *testing.T, r *Response) {
			if r.Observations[0].Role != "user" || r.Observations[0].Content != "x" {
				t.Errorf("environment observation read as %+v", r.Observations[0])
			}
		}},
		{in: `{"state": null}`, check: func(t *testing.T, r *Response) {
			if r.Step("prev").State != nil {
				t.Error("null state did not clear it")
			}
		}},
		{in: `{"state": {"a": [1]}}`, check: func(t *testing.T, r *Response) {
			if string(r.Reset().State.(json.RawMessage)) != `{"a": [1]}` {
				t.Error("state not kept as raw JSON")
			}
		}},
		{in: `{"error": "bad"}`, check: func(t *testing.T, r *Response) {
			if err := r.Err(); err == nil || !strings.Contains(err.Error(), "bad") {
				t.Errorf("Err = %v", err)
			}
		}},
		{in: `{"is_action_valid": false, "anchor": [1, {"b": 2}]}`, check: func(t *testing.T, r *Response) {
			st := r.Step(nil)
			if !st.InvalidAction || !st.ReportsValidity || st.Anchor == nil || *st.Anchor != `[1,{"b":2}]` {
				t.Errorf("step = invalid %v reports %v anchor %v", st.InvalidAction, st.ReportsValidity, st.Anchor)
			}
		}},
		{in: `{"is_action_valid": true, "anchor": "grid\n#.@"}`, check: func(t *testing.T, r *Response) {
			st := r.Step(nil)
			if st.InvalidAction || !st.ReportsValidity || *st.Anchor != "grid\n#.@" {
				t.Errorf("step = invalid %v reports %v anchor %q", st.InvalidAction, st.ReportsValidity, *st.Anchor)
			}
			if r.Reset().Anchor == nil {
				t.Error("reset anchor not read")
			}
		}},
		{in: `{"anchor": null}`, check: func(t *testing.T, r *Response) {
			if st := r.Step(nil); st.Anchor != nil || st.ReportsValidity || st.InvalidAction {
				t.Errorf("null anchor / absent validity = %+v", st)
			}
		}},
		{in: `{"is_action_valid": 0}`, wantErr: "not a response object"},
		{in: `{"rewards": 1}`, wantErr: "unknown field"},
		{in: `{} {}`, wantErr: "data after"},
		{in: ``, wantErr: "empty response"},
		{in: `{"observations":[{"role":"bot"}]}`, wantErr: "observations[0].role"},
		{in: `{"tools":[1]}`, wantErr: "tools[0]"},
		{in: `{"reward":"1"}`, wantErr: "not a response object"},
	}
	for _, c := range cases {
		r, err := Decode([]byte(c.in))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		c.check(t, r)
	}
}

func TestRequests(t *testing.T) {
	r := &pipeline.Rollout{TrajID: "t", Seed: 3, Task: &pipeline.Task{Fields: map[string]any{"q": 1}},
		Messages: []pipeline.Message{{Role: "user", Content: "hi", TokenIDs: []int32{1, 2}, Turn: 0}}}
	reset, err := NewReset(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(reset)
	if string(b) != `{"traj_id":"t","seed":3,"task":{"q":1},"messages":[{"role":"user","content":"hi"}]}` {
		t.Fatalf("reset = %s", b)
	}
	r.State = json.RawMessage(`{"k":2}`)
	step, err := NewStep(r, pipeline.Message{Role: "assistant", Content: "a"})
	if err != nil {
		t.Fatal(err)
	}
	step.ID, step.Op = 9, "step"
	b, _ = json.Marshal(step)
	if string(b) != `{"id":9,"op":"step","traj_id":"t","state":{"k":2},"action":{"role":"assistant","content":"a"},"messages":[{"role":"user","content":"hi"}]}` {
		t.Fatalf("step = %s", b)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"observations":[{"role":"tool","content":"x","tool_call_id":"c"}],"state":[1]}`, `{"error":null}`, `nope`, `{"metrics":{"a":1e308}}`,
		`{"observations":[{"content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		`{"observations":[{"content":[{"type":"input_image","image_url":"https://h/x.png"},"y"]}]}`,
		`{"anchor":{"x":[1,2]},"is_action_valid":false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if _, err := StateJSON(r.Step(nil).State); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("decoded response does not re-encode: %v", err)
		}
	})
}

// An observation may hold images: content parts are read from a response
// and written back as OpenAI chat parts in the next request.
func TestImageObservations(t *testing.T) {
	const png = "data:image/png;base64,iVBORw0KGgo="
	r, err := Decode([]byte(`{"observations":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"` + png + `"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := r.Observations[0]
	want := []pipeline.ContentPart{{Type: "text", Text: "look"}, {Type: "image_url", ImageURL: png}}
	if m.Content != "look" || !reflect.DeepEqual(m.Parts, want) {
		t.Fatalf("decoded %+v", m)
	}
	b, err := json.Marshal(FromMessage(pipeline.Message{Role: "user", Content: "look", Parts: want}))
	if err != nil {
		t.Fatal(err)
	}
	if got := `{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"` + png + `"}}]}`; string(b) != got {
		t.Errorf("encoded %s", b)
	}
	for _, bad := range []string{
		`{"observations":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///x.png"}}]}]}`,
		`{"observations":[{"role":"user","content":"x","extra":1}]}`,
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
