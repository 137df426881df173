package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
)

func TestEncodeSGLang(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
		sp     map[string]any
		extra  map[string]any // top-level keys beyond the fixed ones
	}{
		{"empty", nil, map[string]any{}, nil},
		{"renamed", map[string]any{"max_tokens": 64, "seed": 3, "min_tokens": 2, "temperature": 0.7, "top_p": 0.9, "stop": []any{"</s>"}},
			map[string]any{"max_new_tokens": 64.0, "sampling_seed": 3.0, "min_new_tokens": 2.0, "temperature": 0.7, "top_p": 0.9, "stop": []any{"</s>"}}, nil},
		{"max_completion_tokens", map[string]any{"max_completion_tokens": 8}, map[string]any{"max_new_tokens": 8.0}, nil},
		{"max_tokens wins", map[string]any{"max_completion_tokens": 8, "max_tokens": 9}, map[string]any{"max_new_tokens": 9.0}, nil},
		{"openai extras dropped", map[string]any{"logprobs": true, "return_token_ids": true, "chat_template_kwargs": map[string]any{"x": 1}, "top_k": 20},
			map[string]any{"top_k": 20.0}, nil},
		{"unknown kept for the server to name", map[string]any{"frobnicate": 1}, map[string]any{"frobnicate": 1.0}, nil},
		{"priority top level", map[string]any{"priority": 5, "temperature": 1}, map[string]any{"temperature": 1.0}, map[string]any{"priority": 5.0}},
		{"extra_body flattened", map[string]any{"top_k": 5, "extra_body": map[string]any{"top_k": 20, "min_p": 0.05, "seed": 9}},
			map[string]any{"top_k": 20.0, "min_p": 0.05, "sampling_seed": 9.0}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := encodeSGLang(&inference.Request{PromptTokenIDs: []int32{1, 2}, Params: tt.params}, "r1")
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"input_ids": []any{1.0, 2.0}, "sampling_params": tt.sp, "return_logprob": true, "stream": false, "rid": "r1"}
			for k, v := range tt.extra {
				want[k] = v
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("body %v\nwant %v", got, want)
			}
		})
	}
}

func TestDecodeSGLang(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		ids     []int32
		lps     []float32
		finish  string
		cached  int
		wantErr string
	}{
		{"stop", `{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":{"type":"stop","matched":2},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":1,"output_token_logprobs":[[-0.5,5,null],[-1,6,null]]}}`,
			[]int32{5, 6}, []float32{-0.5, -1}, "stop", 1, ""},
		{"length", `{"text":"a","output_ids":[5],"meta_info":{"finish_reason":{"type":"length","length":1},"prompt_tokens":3,"completion_tokens":1,"output_token_logprobs":[[-0.5,5,"a"]]}}`,
			[]int32{5}, []float32{-0.5}, "length", 0, ""},
		{"abort", `{"text":"","output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"Abort"},"prompt_tokens":3,"completion_tokens":0,"output_token_logprobs":[]}}`,
			[]int32{}, nil, inference.FinishAbort, 0, ""},
		{"ids from the logprobs", `{"text":"a","meta_info":{"finish_reason":{"type":"stop"},"prompt_tokens":3,"completion_tokens":1,"output_token_logprobs":[[-0.5,7]]}}`,
			[]int32{7}, []float32{-0.5}, "stop", 0, ""},
		{"finish as a string", `{"output_ids":[1],"meta_info":{"finish_reason":"length","output_token_logprobs":[[-0.1,1]]}}`,
			[]int32{1}, []float32{-0.1}, "length", 0, ""},
		{"null logprob", `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[null,1]]}}`,
			[]int32{1}, []float32{0}, "stop", 0, ""},
		{"no meta_info", `{"text":"a"}`, nil, nil, "", 0, "no meta_info"},
		{"error object", `{"error":{"message":"boom"}}`, nil, nil, "", 0, "boom"},
		{"no finish", `{"output_ids":[1],"meta_info":{"finish_reason":null,"output_token_logprobs":[[-1,1]]}}`, nil, nil, "", 0, "finish_reason: missing"},
		{"unknown finish", `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"eos"},"output_token_logprobs":[[-1,1]]}}`, nil, nil, "", 0, "not stop, length or abort"},
		{"ids differ", `{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1,1],[-1,3]]}}`, nil, nil, "", 0, "output_token_logprobs[1]: token 3"},
		{"count differs", `{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1,1]]}}`, nil, nil, "", 0, "1 entries for 2"},
		{"no logprobs", `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"}}}`, nil, nil, "", 0, "none for 1"},
		{"short entry", `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1]]}}`, nil, nil, "", 0, "want [logprob, token_id"},
		{"positive logprob", `{"output_ids":[1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[2,1]]}}`, nil, nil, "", 0, "not a log-probability"},
		{"negative id", `{"output_ids":[-1],"meta_info":{"finish_reason":{"type":"stop"},"output_token_logprobs":[[-1,-1]]}}`, nil, nil, "", 0, "negative"},
		{"cached over prompt", `{"output_ids":[],"meta_info":{"finish_reason":{"type":"stop"},"prompt_tokens":1,"cached_tokens":2}}`, nil, nil, "", 0, "cached_tokens"},
		{"not json", `{`, nil, nil, "", 0, "unexpected end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := decodeSGLang([]byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(resp.Message.TokenIDs, tt.ids) || !slices.Equal(resp.Message.Logprobs, tt.lps) || resp.FinishReason != tt.finish || resp.CachedPromptTokens != tt.cached {
				t.Fatalf("ids %v logprobs %v finish %q cached %d", resp.Message.TokenIDs, resp.Message.Logprobs, resp.FinishReason, resp.CachedPromptTokens)
			}
		})
	}
}

func FuzzDecodeSGLang(f *testing.F) {
	f.Add([]byte(`{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":{"type":"stop"},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":1,"output_token_logprobs":[[-0.5,5,null],[-1,6,null]]},"sim_trailer":{}}`))
	f.Add([]byte(`{"meta_info":{"finish_reason":"abort","output_token_logprobs":[[null,1,"x"]]}}`))
	f.Add([]byte(`{"error":{"message":"x"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := decodeSGLang(data)
		if err != nil {
			if resp != nil {
				t.Fatal("response with an error")
			}
			return
		}
		if resp.Message.Logprobs != nil && len(resp.Message.Logprobs) != len(resp.Message.TokenIDs) {
			t.Fatalf("%d logprobs for %d ids", len(resp.Message.Logprobs), len(resp.Message.TokenIDs))
		}
		for _, lp := range resp.Message.Logprobs {
			if math.IsNaN(float64(lp)) || lp > maxLogprobSlack {
				t.Fatalf("logprob %v", lp)
			}
		}
		switch resp.FinishReason {
		case "stop", "length", inference.FinishAbort:
		default:
			t.Fatalf("finish %q", resp.FinishReason)
		}
		// The entries read as encoding/json reads them, generically.
		var ref struct {
			MetaInfo struct {
				OutputTokenLogprobs [][]any `json:"output_token_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("decoded, but not generically: %v", err)
		}
		for i, e := range ref.MetaInfo.OutputTokenLogprobs {
			id, ok := e[1].(float64)
			if !ok || int32(id) != resp.Message.TokenIDs[i] {
				t.Fatalf("entry %d: %v, decoded id %d", i, e, resp.Message.TokenIDs[i])
			}
			switch lp := e[0].(type) {
			case nil:
				if resp.Message.Logprobs[i] != 0 {
					t.Fatalf("entry %d: null logprob decoded as %v", i, resp.Message.Logprobs[i])
				}
			case float64:
				if float32(max(lp, -math.MaxFloat32)) != resp.Message.Logprobs[i] {
					t.Fatalf("entry %d: logprob %v decoded as %v", i, lp, resp.Message.Logprobs[i])
				}
			default:
				t.Fatalf("entry %d: logprob %v accepted", i, e[0])
			}
		}
	})
}

// The client sends token-id prompts of generate.api: sglang to the
// server's root /generate (not under /v1), with a fresh rid each, and a
// server without /generate gets an error that names the API.
func TestSGLangOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/generate" {
			http.NotFound(w, r)
			return
		}
		data, _ := io.ReadAll(r.Body)
		var b map[string]any
		_ = json.Unmarshal(data, &b)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"text":"x","output_ids":[9],"meta_info":{"finish_reason":{"type":"stop"},"prompt_tokens":2,"completion_tokens":1,"cached_tokens":1,"output_token_logprobs":[[-0.25,9,null]]}}`)
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL + "/v1")
	cfg.API = inference.APISGLang
	c, err := NewHTTP(cfg, HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		resp, err := c.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1, 2}, Params: map[string]any{"max_tokens": 4, "priority": 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(resp.Message.TokenIDs, []int32{9}) || resp.Message.Logprobs[0] != -0.25 || resp.PromptTokens != 2 || resp.CachedPromptTokens != 1 {
			t.Fatalf("response %+v", resp)
		}
	}
	if len(bodies) != 2 || bodies[0]["rid"] == bodies[1]["rid"] || bodies[0]["priority"] != 1.0 {
		t.Fatalf("bodies %v", bodies)
	}
	// A chat request of validate still goes to /v1/chat/completions.
	if _, err := c.Complete(context.Background(), &inference.Request{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("chat request: %v", err)
	}
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	cfg.Endpoints = []string{other.URL}
	c2, err := NewHTTP(cfg, HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.Complete(context.Background(), &inference.Request{PromptTokenIDs: []int32{1}})
	if err == nil || !strings.Contains(err.Error(), "generate.api: sglang") {
		t.Fatalf("error %v", err)
	}
}

// sglangBody is a /generate answer of n tokens with return_logprob, as
// SGLang writes it.
func sglangBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"text":"`)
	for range n {
		b.WriteString("tok ")
	}
	b.WriteString(`","output_ids":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 2000+i*53%150000)
	}
	b.WriteString(`],"meta_info":{"id":"r","finish_reason":{"type":"length","length":` + fmt.Sprint(n) + `},"prompt_tokens":512,"completion_tokens":` + fmt.Sprint(n) + `,"cached_tokens":256,"output_token_logprobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `[%.6f,%d,null]`, -float64(i%97)/13.0, 2000+i*53%150000)
	}
	b.WriteString(`],"e2e_latency":1.5}}`)
	return []byte(b.String())
}

// BenchmarkDecodeSGLang decodes a 2,048-token /generate answer with
// logprobs (compare BenchmarkDecodeResponse).
func BenchmarkDecodeSGLang(b *testing.B) {
	body := sglangBody(2048)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		resp, err := decodeSGLang(body)
		if err != nil || len(resp.Message.Logprobs) != 2048 || len(resp.Message.TokenIDs) != 2048 {
			b.Fatalf("decode: %v", err)
		}
	}
}

// Against the simulator's /generate: the ids and logprobs are those of
// the same token-id prompt on /v1/completions, and a prompt over the
// context is a context_length error.
func TestSGLangAgainstSimulator(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Preset: "agent", MaxModelLen: 80})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	client := func(api inference.API) *HTTPClient {
		cfg := testConfig(srv.URL + "/v1")
		cfg.API, cfg.MaxAttempts = api, 1
		c, err := NewHTTP(cfg, HTTPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	native, tokens := client(inference.APISGLang), client(inference.APITokens)
	prompt := sim.Tokenize("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
	req := &inference.Request{PromptTokenIDs: prompt, Params: map[string]any{"max_tokens": 8, "seed": 4}}
	a, err := native.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tokens.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Message.TokenIDs, b.Message.TokenIDs) || !slices.Equal(a.Message.Logprobs, b.Message.Logprobs) || a.FinishReason != b.FinishReason ||
		a.PromptTokens != len(prompt) || a.CompletionTokens != len(a.Message.TokenIDs) || string(a.Extra) != string(b.Extra) {
		t.Fatalf("native %+v\ncompletions %+v", a, b)
	}
	_, err = native.Complete(context.Background(), &inference.Request{PromptTokenIDs: prompt, Params: map[string]any{"max_tokens": 100}})
	if inference.ErrorClass(err) != inference.ClassContextLength {
		t.Fatalf("over the context: %v (class %s)", err, inference.ErrorClass(err))
	}
}
