package openai

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// vllmBody is a chat completion of n tokens as vLLM writes it with
// logprobs: true, top_logprobs: 1 and return_token_ids: true, after a
// 512-token prompt.
func vllmBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","prompt_token_ids":[`)
	for i := 0; i < 512; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 1000+i*37%150000)
	}
	b.WriteString(`],"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":"`)
	for i := 0; i < n; i++ {
		b.WriteString("tok ")
	}
	b.WriteString(`","tool_calls":[]},"logprobs":{"content":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		lp := -float64(i%97) / 13.0
		fmt.Fprintf(&b, `{"token":"tok ","logprob":%.6f,"bytes":[116,111,107,32],"top_logprobs":[{"token":"tok ","logprob":%.6f,"bytes":[116,111,107,32]}]}`, lp, lp)
	}
	b.WriteString(`]},"finish_reason":"length","stop_reason":null,"token_ids":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 2000+i*53%150000)
	}
	fmt.Fprintf(&b, `]}],"usage":{"prompt_tokens":512,"total_tokens":%d,"completion_tokens":%d}}`, 512+n, n)
	return b.Bytes()
}

// BenchmarkDecodeResponse decodes a 2,048-token response with logprobs.
func BenchmarkDecodeResponse(b *testing.B) { benchDecode(b, vllmBody(2048), 2048) }

// benchDecode decodes body, an answer of n tokens with ids and logprobs.
func benchDecode(b *testing.B, body []byte, n int) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		resp, err := decodeResponse(body)
		if err != nil || len(resp.Message.Logprobs) != n || len(resp.Message.TokenIDs) != n {
			b.Fatalf("decode: %v", err)
		}
	}
}

// vllmCompletionBody is a text completion of n tokens as vLLM writes it
// for a token-id prompt with logprobs: 0 and return_token_ids: true (the
// tokens protocol): the token strings, their logprobs (the first null where
// the prompt is echoed, here a number) and text offsets.
func vllmCompletionBody(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"`)
	for i := 0; i < n; i++ {
		b.WriteString("tok ")
	}
	b.WriteString(`","logprobs":{"text_offset":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 4*i)
	}
	b.WriteString(`],"token_logprobs":[null`)
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, ",%.6f", -float64(i%97)/13.0)
	}
	b.WriteString(`],"tokens":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"token_id:%d"`, 2000+i*53%150000)
	}
	b.WriteString(`],"top_logprobs":null},"finish_reason":"length","stop_reason":null,"token_ids":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d", 2000+i*53%150000)
	}
	fmt.Fprintf(&b, `],"prompt_token_ids":null}],"usage":{"prompt_tokens":512,"total_tokens":%d,"completion_tokens":%d}}`, 512+n, n)
	return b.Bytes()
}

// BenchmarkDecodeCompletion decodes a 2,048-token text completion with
// token ids and logprobs (the tokens protocol's answer).
func BenchmarkDecodeCompletion(b *testing.B) { benchDecode(b, vllmCompletionBody(2048), 2048) }

// BenchmarkComplete is one request over loopback HTTP, end to end, with the
// same 2,048-token body.
func BenchmarkComplete(b *testing.B) {
	body := vllmBody(2048)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(body)
	}))
	defer srv.Close()
	c, err := NewHTTP(testConfig(srv.URL), HTTPOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := userReq("x")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Complete(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchBodyDecodes(t *testing.T) {
	resp, err := decodeResponse(vllmBody(16))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.PromptTokenIDs) != 512 || len(resp.Message.TokenIDs) != 16 || resp.Message.Logprobs[13] != float32(-13.0/13.0) {
		t.Errorf("decoded %d prompt ids, %d ids, logprobs %v", len(resp.PromptTokenIDs), len(resp.Message.TokenIDs), resp.Message.Logprobs)
	}
}

// TestCompletionBodyDecodes: the completion body's null first logprob
// reads as 0, the others as written.
func TestCompletionBodyDecodes(t *testing.T) {
	resp, err := decodeResponse(vllmCompletionBody(16))
	if err != nil {
		t.Fatal(err)
	}
	lp := resp.Message.Logprobs
	if len(resp.Message.TokenIDs) != 16 || len(lp) != 16 || lp[0] != 0 || lp[13] != float32(-13.0/13.0) {
		t.Errorf("decoded %d ids, logprobs %v", len(resp.Message.TokenIDs), lp)
	}
}
