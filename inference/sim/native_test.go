package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type nativeAnswer struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID           string `json:"id"`
		FinishReason struct {
			Type   string `json:"type"`
			Length int    `json:"length"`
		} `json:"finish_reason"`
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		OutputTokenLogprobs [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
	SimTrailer json.RawMessage `json:"sim_trailer"`
}

// POST /generate with input_ids answers what /v1/completions answers to
// the same token-id prompt and seed: the same ids, logprobs, text, finish
// reason and trailer, in SGLang's native shape.
func TestNativeGenerateMatchesCompletions(t *testing.T) {
	_, url := startHTTP(t, Options{Seed: 3, Preset: "agent"})
	prompt := Tokenize("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
	for _, maxTokens := range []int{4, 1000} {
		t.Run(fmt.Sprint(maxTokens), func(t *testing.T) {
			p, _ := json.Marshal(prompt)
			st, b := postJSON(t, url+"/v1/completions", fmt.Sprintf(`{"model":"sim","prompt":%s,"max_tokens":%d,"seed":5,"logprobs":1,"return_token_ids":true}`, p, maxTokens))
			if st != 200 {
				t.Fatalf("completions: %d %s", st, b)
			}
			var c struct {
				Choices []struct {
					Text         string  `json:"text"`
					TokenIDs     []int32 `json:"token_ids"`
					FinishReason string  `json:"finish_reason"`
					Logprobs     struct {
						TokenLogprobs []float32 `json:"token_logprobs"`
					} `json:"logprobs"`
				} `json:"choices"`
				SimTrailer json.RawMessage `json:"sim_trailer"`
			}
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			st, b = postJSON(t, url+"/generate", fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"sampling_seed":5,"temperature":1},"return_logprob":true,"rid":"r-1","priority":2}`, p, maxTokens))
			if st != 200 {
				t.Fatalf("generate: %d %s", st, b)
			}
			var n nativeAnswer
			if err := json.Unmarshal(b, &n); err != nil {
				t.Fatal(err)
			}
			want := c.Choices[0]
			if !slices.Equal(n.OutputIDs, want.TokenIDs) || n.Text != want.Text || n.MetaInfo.FinishReason.Type != want.FinishReason || string(n.SimTrailer) != string(c.SimTrailer) {
				t.Fatalf("native %s\ncompletions %+v", b, want)
			}
			if n.MetaInfo.ID != "r-1" || n.MetaInfo.PromptTokens != len(prompt) || n.MetaInfo.CompletionTokens != len(want.TokenIDs) || len(n.MetaInfo.OutputTokenLogprobs) != len(want.TokenIDs) {
				t.Fatalf("meta_info %+v", n.MetaInfo)
			}
			for i, e := range n.MetaInfo.OutputTokenLogprobs {
				var lp float32
				var id int32
				if json.Unmarshal(e[0], &lp) != nil || json.Unmarshal(e[1], &id) != nil || lp != want.Logprobs.TokenLogprobs[i] || id != want.TokenIDs[i] || string(e[2]) != "null" {
					t.Fatalf("output_token_logprobs[%d] = %s", i, e)
				}
			}
			if want.FinishReason == "length" && n.MetaInfo.FinishReason.Length != maxTokens {
				t.Fatalf("finish_reason %+v", n.MetaInfo.FinishReason)
			}
		})
	}
	// Without return_logprob there are none.
	p, _ := json.Marshal(prompt)
	st, b := postJSON(t, url+"/generate", fmt.Sprintf(`{"input_ids":%s}`, p))
	if st != 200 || strings.Contains(string(b), "output_token_logprobs") {
		t.Fatalf("%d %s", st, b)
	}
}

func TestNativeGenerateRefuses(t *testing.T) {
	_, url := startHTTP(t, Options{Seed: 3, MaxModelLen: 50})
	for _, tt := range []struct{ body, want string }{
		{`{"text":"hi"}`, "input_ids only"},
		{`{"input_ids":[[1,2],[3]]}`, "one non-empty list"},
		{`{"input_ids":[]}`, "one non-empty list"},
		{`{"input_ids":[1,-2]}`, "negative"},
		{`{"input_ids":[1],"stream":true}`, "streaming"},
		{`{"input_ids":[1],"rid":["a","b"]}`, "rid"},
		{`{"input_ids":[1],"sampling_params":{"n":2}}`, "n=1"},
		{`{"input_ids":[1],"sampling_params":[]}`, "sampling_params"},
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":0}}`, "max_tokens"},
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":100}}`, "maximum context length"},
		{`{`, "invalid JSON"},
	} {
		st, b := postJSON(t, url+"/generate", tt.body)
		if st != 400 || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tt.body, st, b, tt.want)
		}
	}
}

func FuzzNativeRequest(f *testing.F) {
	f.Add([]byte(`{"input_ids":[1,2],"sampling_params":{"max_new_tokens":3,"sampling_seed":1},"rid":"x","priority":1}`))
	f.Add([]byte(`{"input_ids":[[1]],"sampling_params":null}`))
	f.Add([]byte(`{"text":"a","input_ids":[1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req nativeRequest
		if json.Unmarshal(data, &req) != nil {
			return
		}
		ids, err := nativeInputIDs(req)
		if err == nil {
			if len(ids) == 0 || slices.ContainsFunc(ids, func(id int32) bool { return id < 0 }) {
				t.Fatalf("ids %v from %q", ids, data)
			}
		}
		params, err := nativeParams(req.SamplingParams)
		if err == nil {
			if _, ok := params["max_new_tokens"]; ok {
				t.Fatalf("max_new_tokens kept in %v", params)
			}
			if _, ok := params["sampling_seed"]; ok {
				t.Fatalf("sampling_seed kept in %v", params)
			}
		}
	})
}

// POST /abort_request {"rid"} cuts that request alone short: it answers
// with finish_reason abort, the other request of the server finishes.
func TestNativeAbortByRID(t *testing.T) {
	_, url := startHTTP(t, Options{Seed: 7, TimeScale: 1, A: time.Millisecond, C: time.Nanosecond, P: time.Nanosecond,
		Length: LengthModel{Median: 300, Sigma: 0.01, Cap: 2000}})
	p, _ := json.Marshal(Tokenize("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"))
	answers := make(chan nativeAnswer, 2)
	for _, rid := range []string{"a", "b"} {
		go func() {
			resp, err := http.Post(url+"/generate", "application/json", strings.NewReader(fmt.Sprintf(`{"input_ids":%s,"rid":%q,"sampling_params":{"sampling_seed":1}}`, p, rid)))
			if err != nil {
				answers <- nativeAnswer{}
				return
			}
			defer resp.Body.Close()
			var n nativeAnswer
			_ = json.NewDecoder(resp.Body).Decode(&n)
			answers <- n
		}()
	}
	time.Sleep(50 * time.Millisecond)
	st, b := postJSON(t, url+"/abort_request", `{"rid":"a"}`)
	if st != 200 || string(b) != `{"aborted":1}` {
		t.Fatalf("abort: %d %s", st, b)
	}
	got := map[string]nativeAnswer{}
	for range 2 {
		n := <-answers
		got[n.MetaInfo.ID] = n
	}
	a, bb := got["a"], got["b"]
	if a.MetaInfo.FinishReason.Type != "abort" || len(a.OutputIDs) == 0 || len(a.OutputIDs) >= len(bb.OutputIDs) {
		t.Fatalf("aborted request: %s with %d ids", a.MetaInfo.FinishReason.Type, len(a.OutputIDs))
	}
	if bb.MetaInfo.FinishReason.Type == "abort" {
		t.Fatalf("the other request was aborted too")
	}
}

// Faults are drawn on /generate as on the OpenAI APIs.
func TestNativeFaults(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	body := `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4}}`
	for _, tt := range []struct {
		name   string
		faults Faults
		check  func(resp *http.Response, data []byte, err error) bool
	}{
		{"503", Faults{Errors: map[int]float64{503: 1}}, func(r *http.Response, d []byte, err error) bool {
			return err == nil && r.StatusCode == 503 && r.Header.Get("Retry-After") != "" && json.Valid(d)
		}},
		{"reset", Faults{Reset: 1}, func(_ *http.Response, _ []byte, err error) bool { return err != nil }},
		{"malformed", Faults{Malformed: 1}, func(r *http.Response, d []byte, err error) bool {
			return err == nil && r.StatusCode == 200 && !json.Valid(d)
		}},
		{"truncate", Faults{Truncate: 1}, func(_ *http.Response, d []byte, err error) bool {
			return errors.Is(err, io.ErrUnexpectedEOF) && len(d) > 0
		}},
		{"stall", Faults{Stall: 1, StallFor: time.Millisecond}, func(r *http.Response, d []byte, err error) bool {
			return err == nil && r.StatusCode == 200 && json.Valid(d) && strings.Contains(string(d), "output_ids")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.faults.RetryAfter = time.Second
			_, url := startHTTP(t, Options{Seed: 1, Faults: tt.faults})
			resp, err := client.Post(url+"/generate", "application/json", strings.NewReader(body))
			var data []byte
			if err == nil {
				data, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if !tt.check(resp, data, err) {
				t.Fatalf("response %v, error %v, body %q", resp, err, data)
			}
		})
	}
}
