package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/trajflow/trajflow/pipeline"
)

func ExampleMergeParams() {
	row := map[string]any{ // a NeMo Gym row's responses_create_params (without input)
		"temperature": 1.0,
		"max_tokens":  512,
		"extra_body":  map[string]any{"top_k": 20, "min_p": 0.05},
	}
	cfg := map[string]any{ // generate.params
		"temperature": 0.6,
		"extra_body":  map[string]any{"top_k": 50},
		"logprobs":    true,
	}
	merged := inference.MergeParams(row, cfg)
	out, _ := json.Marshal(merged) // keys sorted
	fmt.Println(string(out))
	// Output:
	// {"extra_body":{"top_k":50},"logprobs":true,"max_tokens":512,"temperature":0.6}
}

func ExampleNewHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"prompt_token_ids":[1,2],"choices":[{"message":{"content":"4"},"finish_reason":"stop",
			"token_ids":[19],"logprobs":{"content":[{"token":"4","logprob":-0.01}]}}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	}))
	defer srv.Close()

	gen := inference.Config{
		Endpoints: []string{srv.URL + "/v1"}, Model: "my-model", API: "chat",
		Concurrency: 8, MaxAttempts: 3,
		Params: map[string]any{"logprobs": true, "return_token_ids": true},
	}
	c, err := openai.NewHTTP(gen, openai.HTTPOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	resp, err := c.Complete(context.Background(), &inference.Request{
		Messages: []pipeline.Message{{Role: "user", Content: "2+2?"}},
		// The task's own params, then generate.params on top.
		Params:   inference.MergeParams(map[string]any{"max_tokens": 16}, gen.Params),
		Affinity: "group-17",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Message.Content, resp.FinishReason, resp.PromptTokenIDs, resp.Message.TokenIDs, resp.Message.Logprobs)
	// Output:
	// 4 stop [1 2] [19] [-0.01]
}
