package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func startHTTP(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	s := New(opts)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts.URL
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Text     string  `json:"text"`
		TokenIDs []int32 `json:"token_ids"`
		Logprobs *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float32 `json:"logprob"`
			} `json:"content"`
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float32 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	PromptTokenIDs []int32          `json:"prompt_token_ids"`
	SimTrailer     *Trailer         `json:"sim_trailer"`
	Error          *json.RawMessage `json:"error"`
}

func post(t *testing.T, url, body string) (*http.Response, []byte, error) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

func postChat(t *testing.T, base, body string) (*http.Response, chatResponse) {
	t.Helper()
	resp, data, err := post(t, base+"/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		t.Fatalf("body %q: %v", data, err)
	}
	return resp, cr
}

func TestHTTPChat(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 3})
	body := `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"What is 6 * 7?"}]}],
		"seed":5,"max_tokens":200,"logprobs":true,"return_token_ids":true}`
	resp, cr := postChat(t, base, body)
	if resp.StatusCode != 200 || len(cr.Choices) != 1 {
		t.Fatalf("status %d: %+v", resp.StatusCode, cr)
	}
	c := cr.Choices[0]
	if cr.Object != "chat.completion" || c.Message.Role != "assistant" || c.Message.Content == nil {
		t.Fatalf("response %+v", cr)
	}
	// The same request in-process gives the same reply.
	in := mustComplete(t, s, &inference.Request{Messages: []pipeline.Message{system("Be brief."), user("What is 6 * 7?")},
		Params: map[string]any{"seed": 5, "max_tokens": 200}})
	if *c.Message.Content != in.Message.Content || !slices.Equal(c.TokenIDs, in.Message.TokenIDs) ||
		!slices.Equal(cr.PromptTokenIDs, in.PromptTokenIDs) || c.FinishReason != in.FinishReason {
		t.Fatalf("HTTP and in-process replies differ:\n%q %v\n%q %v", *c.Message.Content, c.TokenIDs, in.Message.Content, in.Message.TokenIDs)
	}
	if cr.Usage.PromptTokens != len(cr.PromptTokenIDs) || cr.Usage.CompletionTokens != len(c.TokenIDs) {
		t.Fatalf("usage %+v", cr.Usage)
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != len(c.TokenIDs) {
		t.Fatal("logprobs.content does not match token_ids")
	}
	var text strings.Builder
	for i, lp := range c.Logprobs.Content {
		if lp.Logprob != in.Message.Logprobs[i] || lp.Token != tokenText(c.TokenIDs[i], false) {
			t.Fatalf("logprob %d: %+v", i, lp)
		}
		text.WriteString(lp.Token)
	}
	if want := *c.Message.Content; strings.TrimSuffix(text.String(), "<|end|>") != want {
		t.Fatalf("tokens join to %q, content %q", text.String(), want)
	}
	if cr.SimTrailer == nil {
		t.Fatal("no sim_trailer")
	}
	// Without return_token_ids and logprobs, as vLLM: no ids, no logprobs.
	_, cr = postChat(t, base, `{"messages":[{"role":"user","content":"hi"}]}`)
	if cr.PromptTokenIDs != nil || cr.Choices[0].TokenIDs != nil || cr.Choices[0].Logprobs != nil || cr.Usage.CompletionTokens == 0 {
		t.Fatalf("unrequested fields: %+v", cr)
	}
}

func TestHTTPToolCall(t *testing.T) {
	_, base := startHTTP(t, Options{Seed: 3, ToolCallRate: 1})
	_, cr := postChat(t, base, `{"messages":[{"role":"user","content":"look it up"}],"seed":1,
		"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{}}}}]}`)
	c := cr.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "lookup" ||
		c.Message.ToolCalls[0].Function.Arguments != "{}" || c.Message.ToolCalls[0].Type != "function" {
		t.Fatalf("choice %+v", c)
	}
}

func TestHTTPCompletions(t *testing.T) {
	_, base := startHTTP(t, Options{Seed: 3})
	_, data, err := post(t, base+"/v1/completions", `{"prompt":"What is 1 + 1?","seed":2,"logprobs":1,"return_token_ids":true,"max_tokens":50}`)
	if err != nil {
		t.Fatal(err)
	}
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		t.Fatal(err)
	}
	c := cr.Choices[0]
	if cr.Object != "text_completion" || c.Text == "" || !slices.Equal(cr.PromptTokenIDs, Tokenize("What is 1 + 1?")) ||
		c.Logprobs == nil || len(c.Logprobs.Tokens) != len(c.TokenIDs) || len(c.Logprobs.TokenLogprobs) != len(c.TokenIDs) {
		t.Fatalf("completion %s", data)
	}
}

func TestHTTPModelsHealth(t *testing.T) {
	_, base := startHTTP(t, Options{Model: "toy", MaxModelLen: 512})
	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) != 1 || m.Data[0].ID != "toy" || m.Data[0].MaxModelLen != 512 {
		t.Fatalf("models %+v %v", m, err)
	}
}

func TestHTTPErrors(t *testing.T) {
	_, base := startHTTP(t, Options{Seed: 3, MaxModelLen: 40})
	for _, tc := range []struct{ body, want string }{
		{`{`, "invalid JSON"},
		{`{"messages":[]}`, "messages"},
		{`{"messages":[{"role":"user","content":"x"}],"stream":true}`, "stream"},
		{`{"messages":[{"role":"user","content":"x"}],"n":2}`, "n:"},
		{`{"messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{`{"messages":[{"role":"user","content":"x"}],"seed":"a"}`, "seed"},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":100}`, "This model's maximum context length is 40 tokens. However, you requested"},
	} {
		resp, data, err := post(t, base+"/v1/chat/completions", tc.body)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if resp.StatusCode != 400 || json.Unmarshal(data, &e) != nil || e.Error.Code != 400 || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: status %d body %s, want 400 mentioning %q", tc.body, resp.StatusCode, data, tc.want)
		}
	}
}

const hiBody = `{"messages":[{"role":"user","content":"hi"}],"seed":1}`

func TestHTTPFaults(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	do := func(base string) (*http.Response, []byte, error) {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(hiBody))
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp, data, err
	}
	for _, code := range []int{429, 500, 503} {
		_, base := startHTTP(t, Options{Faults: Faults{Errors: map[int]float64{code: 1}, RetryAfter: 3 * time.Second}})
		resp, data, err := do(base)
		if err != nil || resp.StatusCode != code {
			t.Fatalf("%d: %v %v", code, resp, err)
		}
		wantRA := ""
		if code != 500 {
			wantRA = "3"
		}
		if ra := resp.Header.Get("Retry-After"); ra != wantRA {
			t.Errorf("%d: Retry-After %q, want %q", code, ra, wantRA)
		}
		if !json.Valid(data) {
			t.Errorf("%d: body %q", code, data)
		}
	}
	t.Run("reset", func(t *testing.T) {
		_, base := startHTTP(t, Options{Faults: Faults{Reset: 1}})
		if _, _, err := do(base); err == nil {
			t.Fatal("no error from a reset connection")
		}
	})
	t.Run("malformed", func(t *testing.T) {
		_, base := startHTTP(t, Options{Faults: Faults{Malformed: 1}})
		resp, data, err := do(base)
		if err != nil || resp.StatusCode != 200 || json.Valid(data) {
			t.Fatalf("status %v err %v body %q: want 200 with invalid JSON", resp, err, data)
		}
	})
	t.Run("truncate", func(t *testing.T) {
		_, base := startHTTP(t, Options{Faults: Faults{Truncate: 1}})
		_, data, err := do(base)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(data) == 0 || json.Valid(data) {
			t.Fatalf("err %v body %q: want a cut body and unexpected EOF", err, data)
		}
	})
	t.Run("stall", func(t *testing.T) {
		s, base := startHTTP(t, Options{Faults: Faults{Stall: 1, StallFor: time.Millisecond}})
		resp, data, err := do(base)
		if err != nil || resp.StatusCode != 200 || !json.Valid(data) || s.Stats().Requests != 1 {
			t.Fatalf("stalled request: %v %v %q", resp, err, data)
		}
		// A long stall holds the request until the client gives up.
		s2, base2 := startHTTP(t, Options{Faults: Faults{Stall: 1, StallFor: time.Hour}})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", base2+"/v1/chat/completions", strings.NewReader(hiBody))
		if _, err := client.Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the client's deadline", err)
		}
		if s2.Stats().Requests != 0 {
			t.Fatal("stalled request was answered")
		}
	})
}

func TestHTTPClientGoneLeavesBatch(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 1, TimeScale: 1, Length: LengthModel{Median: 2e5, Cap: 1 << 20}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(hiBody))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return s.Stats().Running == 1 })
	cancel()
	<-done
	waitFor(t, func() bool { st := s.Stats(); return st.Running == 0 && st.Cancelled == 1 })
}

func TestHTTPConcurrentBatch(t *testing.T) {
	const B = 8
	s, base := startHTTP(t, Options{Seed: 1, TimeScale: 1, Capacity: B, A: 100 * time.Microsecond, C: time.Microsecond,
		Length: LengthModel{Median: 20, Cap: 100}})
	var wg sync.WaitGroup
	for i := 0; i < B; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, data, err := post(t, base+"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"t%d"}],"seed":%d}`, i, i))
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("request %d: %v %s", i, err, data)
			}
		}(i)
	}
	wg.Wait()
	if st := s.Stats(); st.Requests != B || st.DecodedTokens != B*20 || st.MeanBatch < 1 || st.MeanBatch > B {
		t.Fatalf("stats %+v", st)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		hiBody,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"What is 2+2?"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"seed":3,"max_tokens":5,"logprobs":true}`,
		`{"prompt":["x"],"logprobs":2}`, `{"prompt":"What is (1+2)*3?","n":1}`, `{"messages":[{"role":"user","content":"x"}],"seed":1e30}`,
		`{"messages":[{"role":"user","content":"x"}],"sim_group_size":4,"sim_rollout_index":3}`, `[]`, `null`, `{"tools":[1]}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	s := New(Options{Seed: 1, MaxModelLen: 1 << 16, Length: LengthModel{Median: 10, Sigma: 1, Cap: 64}})
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		req, err := decodeRequest(body, chat)
		if err != nil {
			return
		}
		var in *input
		if chat {
			in, err = s.chatInput(req.messages, req.params, req.wire.Tools)
		} else {
			in, err = s.completionInput(req.prompt, req.params)
		}
		if err != nil {
			return
		}
		rep, err := s.generate(in)
		if err != nil {
			return
		}
		if len(rep.ids) != len(rep.logprobs) || len(rep.ids) == 0 {
			t.Fatalf("ids %d logprobs %d", len(rep.ids), len(rep.logprobs))
		}
		if _, err := json.Marshal(s.wireResponse(in, rep, req, chat, "m")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMain_(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Main(ctx, []string{"--addr", "127.0.0.1:0", "--seed", "4", "--time-scale", "0", "--fail", "500=0", "--rpm", "6000"}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address: %v (stderr %s)", err, stderr.String())
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "sim-server listening on ")
	if !ok || !strings.HasSuffix(base, "/v1") {
		t.Fatalf("printed %q", line)
	}
	resp, data, err := post(t, base+"/chat/completions", hiBody)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", resp, err, data)
	}
	if resp.Header.Get("x-ratelimit-limit-requests") != "6000" {
		t.Fatalf("--rpm: headers %v", resp.Header)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-errc; err != nil {
		t.Fatalf("Main: %v", err)
	}
	for _, args := range [][]string{{"--preset", "nope"}, {"--fail", "429=7"}, {"--capacity", "0"}, {"extra"}, {"--keep", "2"}, {"--rpm", "-1"}, {"--rate-window", "0s"}, {"--batch-delay", "-1s"}} {
		if err := Main(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, args...), io.Discard, io.Discard); err == nil {
			t.Errorf("Main %v: no error", args)
		}
	}
}

// GET /metrics serves vLLM's counters: prompt and generation tokens move
// with the requests served.
func TestHTTPMetrics(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 3, Model: "toy"})
	for range 3 {
		resp, data, err := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"What is 2 + 2?"}],"max_tokens":50}`)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %s", err, data)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	st := s.Stats()
	if st.DecodedTokens == 0 {
		t.Fatal("nothing decoded")
	}
	for _, want := range []string{
		`vllm:num_requests_running{model_name="toy"} 0`,
		`vllm:num_requests_waiting{model_name="toy"} 0`,
		fmt.Sprintf(`vllm:prompt_tokens_total{model_name="toy"} %d`, st.PromptTokens),
		fmt.Sprintf(`vllm:generation_tokens_total{model_name="toy"} %d`, st.DecodedTokens),
		"# TYPE vllm:generation_tokens_total counter",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
}
