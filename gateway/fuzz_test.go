package gateway

import (
	"net/http"
	"testing"
)

// fuzzParser feeds bodies to a parser: it never panics, and what it
// accepts it can answer in its API's shape (streamed or not).
func fuzzParser(f *testing.F, codec apiCodec, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"messages":null,"input":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, req, e := codec.parse(body)
		if e != nil {
			if c != nil || e.Status != http.StatusBadRequest || e.Msg == "" {
				t.Fatalf("refusal %+v with call %v", e, c)
			}
			return
		}
		if c == nil || req == nil || len(c.Messages) == 0 {
			t.Fatalf("accepted without a call or messages: %s", body)
		}
		a := normalize(&Answer{Message: msg{Role: "assistant", Content: "x", ToolCalls: []tcall{{Name: "f", Arguments: "{}"}}}})
		_ = mustJSON(codec.render(req, a, newIDs()))
	})
}

func FuzzChatRequest(f *testing.F) {
	fuzzParser(f, chatCodec{},
		goodChat,
		`{"model":"m","stream":true,"n":1,"max_tokens":5,"stop":["a"],"tools":[`+calcChatTool+`],"tool_choice":"auto","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"m","logit_bias":{},"modalities":["text"],"response_format":{"type":"json_schema","json_schema":{}},"messages":[{"role":"developer","content":null}]}`)
}

func FuzzResponsesRequest(f *testing.F) {
	fuzzParser(f, responsesCodec{},
		goodResponses,
		`{"model":"m","instructions":"s","stream":true,"max_output_tokens":3,"reasoning":{"effort":"low"},"text":{"format":{"type":"json_schema","name":"n","schema":{}}},"tools":[{"type":"function","name":"f","parameters":{}}],"tool_choice":{"type":"function","name":"f"},"input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"}]}`,
		`{"input":[{"type":"reasoning"},{"type":"item_reference","id":"x"}],"previous_response_id":"r"}`)
}

func FuzzMessagesRequest(f *testing.F) {
	fuzzParser(f, messagesCodec{},
		goodMessages,
		`{"model":"m","max_tokens":9,"system":[{"type":"text","text":"s"}],"stop_sequences":["x"],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"1"}]}]}]}`,
		`{"model":"m","max_tokens":1,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":[{"type":"image"}]}]}`)
}

func FuzzReward(f *testing.F) {
	for _, s := range []string{`{"reward":1}`, `{"reward":-0.5e3}`, `{}`, `nope`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, e := parseReward(body); e != nil && e.Status != http.StatusBadRequest {
			t.Fatal(e)
		}
	})
}

// FuzzGymSession: the attribution of a call on the NeMo Gym route never
// panics; it names a non-empty session id, or refuses 400 naming a field.
func FuzzGymSession(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi","metadata":{"trajflow_session":"abc"}}`,
		`{"input":"hi","metadata":{"trajflow_session":7}}`,
		`{"input":"hi","metadata":{"trajflow_session":null}}`,
		`{"input":"hi","metadata":null}`,
		`{"input":"hi","metadata":[]}`,
		`{"input":"hi"}`, `null`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var id string
		o, e := decodeObj(body)
		if e == nil {
			id, e = gymSession(o)
		}
		if e != nil {
			if id != "" || e.Status != http.StatusBadRequest || e.Msg == "" {
				t.Fatalf("refusal %+v with id %q", e, id)
			}
			return
		}
		if id == "" {
			t.Fatalf("accepted without an id: %s", body)
		}
	})
}
