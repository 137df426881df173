package structured_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/pipeline"
)

// script answers each call with the next of its replies.
type script struct {
	replies []string
	finish  []string
	calls   int
}

func (s *script) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	i := min(s.calls, len(s.replies)-1)
	s.calls++
	fin := "stop"
	if i < len(s.finish) {
		fin = s.finish[i]
	}
	return &inference.Response{Message: pipeline.Message{Content: s.replies[i]}, FinishReason: fin, PromptTokens: 10, CompletionTokens: 3}, nil
}

type tokScript struct{ script }

func (tokScript) Tokenize(ctx context.Context, req *inference.TokenizeRequest) ([]int32, error) {
	return []int32{1}, nil
}

var answerSchema = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "a", "schema": map[string]any{
	"type": "object", "required": []any{"answer"}, "additionalProperties": false,
	"properties": map[string]any{"answer": map[string]any{"type": "integer"}, "why": map[string]any{"type": "string"}},
}}}

func retries(n int) structured.Config { return structured.Config{InvalidRetries: &n} }

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		format  any
		cfg     structured.Config
		replies []string
		finish  []string
		// want: the content returned, or the error's words.
		want, wantErr string
		calls         int
		discarded     inference.Usage
	}{
		{name: "valid", format: answerSchema, cfg: retries(2), replies: []string{`{"answer": 4}`}, want: `{"answer": 4}`, calls: 1},
		{name: "valid after two", format: answerSchema, cfg: retries(2), replies: []string{`{"answer": "four"}`, `not json`, `{"answer": 4, "why": "sum"}`},
			want: `{"answer": 4, "why": "sum"}`, calls: 3, discarded: inference.Usage{PromptTokens: 20, CompletionTokens: 6, Tries: 2}},
		{name: "never valid", format: answerSchema, cfg: retries(2), replies: []string{`{"answer": "four"}`},
			wantErr: "schema path /properties/answer/type (reply at /answer)", calls: 3, discarded: inference.Usage{PromptTokens: 30, CompletionTokens: 9, Tries: 3}},
		{name: "missing key", format: answerSchema, cfg: retries(0), replies: []string{`{"why": "x"}`}, wantErr: "schema path /required", calls: 1, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "extra key", format: answerSchema, cfg: retries(0), replies: []string{`{"answer": 1, "x": 2}`}, wantErr: "additionalProperties", calls: 1, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "not JSON", format: answerSchema, cfg: retries(0), replies: []string{`The answer is 4.`}, wantErr: "not JSON", calls: 1, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "two values", format: answerSchema, cfg: retries(0), replies: []string{`{"answer": 4} {"answer": 5}`}, wantErr: "more than one JSON value", calls: 1, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "json_object", format: map[string]any{"type": "json_object"}, cfg: retries(1), replies: []string{`[1]`, `{"a": 1}`}, want: `{"a": 1}`, calls: 2, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "text format", format: map[string]any{"type": "text"}, cfg: retries(2), replies: []string{`plain`}, want: `plain`, calls: 1},
		{name: "no format", cfg: retries(2), replies: []string{`plain`}, want: `plain`, calls: 1},
		{name: "cut, retry_on length", cfg: structured.Config{RetryOn: []string{"length"}}, replies: []string{`abc`, `abcd`}, finish: []string{"length", "stop"}, want: `abcd`, calls: 2, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "cut, kept by default", cfg: structured.Config{}, replies: []string{`abc`}, finish: []string{"length"}, want: `abc`, calls: 1},
		// An answer a pause aborted is a partial output the generate stage
		// continues: passed on unchecked, with the tries before it.
		{name: "aborted, unchecked", format: answerSchema, cfg: retries(2), replies: []string{`{"answer": "four"}`, `{"ans`}, finish: []string{"stop", inference.FinishAbort},
			want: `{"ans`, calls: 2, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
		{name: "aborted, retry_on length", cfg: structured.Config{RetryOn: []string{"length"}}, replies: []string{`ab`}, finish: []string{inference.FinishAbort}, want: `ab`, calls: 1},
		{name: "bad schema", format: map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"type": 5}}}, cfg: retries(2), replies: []string{`{}`}, wantErr: "response_format.json_schema.schema", calls: 0},
		{name: "remote ref", format: map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"$ref": "http://example.com/s.json"}}}, cfg: retries(2), replies: []string{`{}`}, wantErr: "only the schema in response_format", calls: 0},
		{name: "local ref", format: map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{
			"$defs": map[string]any{"n": map[string]any{"type": "number"}}, "type": "object", "properties": map[string]any{"x": map[string]any{"$ref": "#/$defs/n"}}}}},
			cfg: retries(0), replies: []string{`{"x": "y"}`}, wantErr: "/properties/x/$ref/type", calls: 1, discarded: inference.Usage{PromptTokens: 10, CompletionTokens: 3, Tries: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.SetDefaults()
			s := &script{replies: tc.replies, finish: tc.finish}
			c := structured.Wrap(s, tc.cfg)
			req := &inference.Request{Params: map[string]any{}}
			if tc.format != nil {
				req.Params["response_format"] = tc.format
			}
			resp, err := c.Complete(context.Background(), req)
			if s.calls != tc.calls {
				t.Errorf("%d calls, want %d", s.calls, tc.calls)
			}
			if tc.wantErr != "" {
				var e *inference.Error
				if !errors.As(err, &e) || e.Class != structured.ClassInvalidOutput || !strings.Contains(e.Msg, tc.wantErr) {
					t.Fatalf("err %v, want invalid_output saying %q", err, tc.wantErr)
				}
				if e.Discarded != tc.discarded {
					t.Fatalf("discarded %+v, want %+v", e.Discarded, tc.discarded)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != tc.want || resp.Discarded != tc.discarded {
				t.Fatalf("reply %q discarded %+v, want %q %+v", resp.Message.Content, resp.Discarded, tc.want, tc.discarded)
			}
		})
	}
}

func TestWrapKeepsTokenizer(t *testing.T) {
	if _, ok := structured.Wrap(&script{}, structured.Config{}).(inference.Tokenizer); ok {
		t.Fatal("a client without Tokenize gained one")
	}
	if _, ok := structured.Wrap(&tokScript{}, structured.Config{}).(inference.Tokenizer); !ok {
		t.Fatal("the client's Tokenize was lost")
	}
}

func TestConfigValidate(t *testing.T) {
	n := -1
	err := (&structured.Config{InvalidRetries: &n, RetryOn: []string{"length", "stop"}}).Validate()
	if err == nil || !strings.Contains(err.Error(), "invalid_retries") || !strings.Contains(err.Error(), "retry_on[1]") {
		t.Fatalf("err %v", err)
	}
}

// FuzzCheck: any reply against any schema the request carries is a reply
// or an invalid_output error; nothing panics, and a returned reply with a
// schema is one the schema accepts on a second look.
func FuzzCheck(f *testing.F) {
	f.Add(`{"type":"object","required":["a"]}`, `{"a":1}`)
	f.Add(`{"type":"array","items":{"type":"integer"}}`, `[1,"x"]`)
	f.Add(`{"$ref":"#/$defs/x","$defs":{"x":{"enum":[1,2]}}}`, `3`)
	f.Add(`{"pattern":"^a+$"}`, `"aaa"`)
	f.Add(`not json`, `{}`)
	f.Fuzz(func(t *testing.T, schema, reply string) {
		var s any
		if err := json.Unmarshal([]byte(schema), &s); err != nil {
			s = schema
		}
		format := map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": s}}
		c := structured.Wrap(&script{replies: []string{reply}}, retries(0))
		resp, err := c.Complete(context.Background(), &inference.Request{Params: map[string]any{"response_format": format}})
		if err != nil {
			var e *inference.Error
			if !errors.As(err, &e) || e.Class != structured.ClassInvalidOutput {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if resp.Message.Content != reply {
			t.Fatal("the reply changed")
		}
		if _, err := c.Complete(context.Background(), &inference.Request{Params: map[string]any{"response_format": format}}); err != nil {
			t.Fatalf("the same reply failed the second time: %v", err)
		}
	})
}

// record answers every request with a reply that fails any schema, and
// keeps each request's params.
type record struct {
	mu   sync.Mutex
	seen []map[string]any
}

func (r *record) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Params)
	r.mu.Unlock()
	return &inference.Response{Message: pipeline.Message{Role: "assistant", Content: "not json"}, PromptTokens: 3, CompletionTokens: 2}, nil
}

func TestRetriesSendNewBodies(t *testing.T) {
	f := false
	format := map[string]any{"type": "json_object"}
	for _, tc := range []struct {
		name   string
		cfg    structured.Config
		params map[string]any
		check  func(t *testing.T, seen []map[string]any)
	}{
		{"a seed of its own per try", structured.Config{}, map[string]any{"response_format": format}, func(t *testing.T, seen []map[string]any) {
			if _, ok := seen[0]["seed"]; ok {
				t.Fatalf("the first try got a seed: %v", seen[0])
			}
			distinct := map[any]bool{}
			for _, p := range seen[1:] {
				distinct[p["seed"]] = true
			}
			if len(distinct) != 2 || distinct[nil] {
				t.Fatalf("retry seeds %v, want 2 distinct", distinct)
			}
		}},
		{"derived from the request's seed", structured.Config{}, map[string]any{"response_format": format, "seed": 5}, func(t *testing.T, seen []map[string]any) {
			if seen[0]["seed"] != 5 || seen[1]["seed"] != structured.RetrySeed(5, "s", 1) || seen[2]["seed"] != structured.RetrySeed(5, "s", 2) || seen[1]["seed"] == seen[2]["seed"] {
				t.Fatalf("seeds %v %v %v", seen[0]["seed"], seen[1]["seed"], seen[2]["seed"])
			}
		}},
		{"invalid_retry_params", structured.Config{InvalidRetrySeed: &f, InvalidRetryParams: map[string]any{"temperature": 1.0}}, map[string]any{"response_format": format, "temperature": 0.0}, func(t *testing.T, seen []map[string]any) {
			if seen[0]["temperature"] != 0.0 || seen[1]["temperature"] != 1.0 || seen[1]["seed"] != nil {
				t.Fatalf("params %v", seen)
			}
		}},
		{"the same body with invalid_retry_seed false", structured.Config{InvalidRetrySeed: &f}, map[string]any{"response_format": format}, func(t *testing.T, seen []map[string]any) {
			if len(seen[1]) != 1 {
				t.Fatalf("params %v", seen[1])
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			two := 2
			cfg := tc.cfg
			cfg.InvalidRetries = &two
			rec := &record{}
			_, err := structured.Wrap(rec, cfg).Complete(context.Background(), &inference.Request{Params: tc.params, Sample: "s"})
			var e *inference.Error
			if !errors.As(err, &e) || e.Class != structured.ClassInvalidOutput || e.Discarded.Tries != 3 || e.Discarded.PromptTokens != 9 {
				t.Fatalf("error %v, want invalid_output with 3 tries counted", err)
			}
			if len(rec.seen) != 3 {
				t.Fatalf("%d tries, want 3", len(rec.seen))
			}
			if _, ok := tc.params["seed"]; !ok && tc.params["temperature"] == nil {
				if _, ok := tc.params["seed"]; ok || len(tc.params) != 1 {
					t.Fatalf("the request's own params were changed: %v", tc.params)
				}
			}
			tc.check(t, rec.seen)
		})
	}
}
