package config_test

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
)

func TestHostedKeys(t *testing.T) {
	const batch = base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch}\n"
	tests := []struct {
		name string
		yaml string
		want []string // empty: valid
	}{
		{"rate limits", base + "generate:\n  rate_limit: {requests_per_minute: 500, input_tokens_per_minute: 90000}\n", nil},
		{"negative rate limit", base + "generate:\n  rate_limit: {requests_per_minute: -1}\n", []string{"cfg.yaml: line 3: generate.rate_limit.requests_per_minute: must be >= 0"}},
		{"cache", base + "generate: {cache: /tmp/c, cache_max_bytes: 1000000}\n", nil},
		{"s3 cache", base + "generate: {cache: \"s3://bucket/cache\"}\n", []string{"cfg.yaml: line 2: generate.cache:", "a local directory only for now"}},
		{"cache bound without cache", base + "generate: {cache_max_bytes: 10}\n", []string{"generate.cache_max_bytes: has no effect without generate.cache"}},
		{"negative cache bound", base + "generate: {cache: c, cache_max_bytes: -1}\n", []string{"generate.cache_max_bytes: must be >= 0"}},
		{"batch single-turn", batch + "env: {max_turns: 1}\n", nil},
		{"batch of an OpenAI Batch file without env", "source: {path: batch.jsonl, format: openai_batch}\ngenerate: {endpoints: [\"http://h:8000/v1\"], api: batch}\n", nil},
		{"batch with env none", batch + "env: {name: none}\n", nil},
		{"batch multi-turn", batch, []string{"env.max_turns: generate.api: batch is single-turn", "set env.max_turns: 1"}},
		{"batch multi-turn route", batch + "env:\n  max_turns: 1\n  routes:\n    a: {name: math}\n    b: {name: guess, max_turns: 5}\n", []string{"env.routes.b.max_turns: generate.api: batch is single-turn"}},
		{"batch on sim://", base + "generate: {api: batch}\nenv: {max_turns: 1}\n", []string{"generate.endpoints: generate.api: batch needs an HTTP server with the Batch API", "trajflow sim-server"}},
		{"batch with rate_limit", base + "generate:\n  endpoints: [\"http://h:8000/v1\"]\n  api: batch\n  rate_limit: {requests_per_minute: 5}\nenv: {max_turns: 1}\n", []string{"generate.rate_limit: applies to requests sent one by one"}},
		{"batch with prompt.max_tokens", batch + "env: {max_turns: 1}\nprompt: {max_tokens: 100}\n", []string{"prompt.max_tokens: counts the prompt with POST /tokenize, which generate.api: batch does not use"}},
		{"bad batch limits", base + "generate:\n  endpoints: [\"http://h:8000/v1\"]\n  api: batch\n  batch: {max_requests: -1, max_bytes: 10, poll_interval: -1s}\nenv: {max_turns: 1}\n",
			[]string{"generate.batch.max_requests: must be >= 1", "generate.batch.max_bytes: must be >= 1024", "generate.batch.poll_interval: must be > 0"}},
		{"batch with s3 output", batch + "env: {max_turns: 1}\noutput: {dir: s3://bucket/out}\n", []string{"output.dir: generate.api: batch records its batches in the output directory"}},
		{"batch with stream", base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch, params: {stream: true}}\nenv: {max_turns: 1}\n", []string{"generate.params.stream: the Batch API answers whole responses"}},
		{"batch with invalid_retries resending the same body", base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch, invalid_retries: 3, invalid_retry_seed: false}\nenv: {max_turns: 1}\n",
			[]string{"generate.invalid_retries: is 3 with generate.invalid_retry_seed false", "the same custom_id", "invalid_retries: 0"}},
		{"batch with invalid_retries and retry params", base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch, invalid_retries: 3, invalid_retry_seed: false, invalid_retry_params: {temperature: 1}}\nenv: {max_turns: 1}\n", nil},
		{"batch with invalid_retries and seeds", base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch, invalid_retries: 3}\nenv: {max_turns: 1}\n", nil},
		{"batch without invalid_retries", base + "generate: {endpoints: [\"http://h:8000/v1\"], api: batch, invalid_retries: 0, invalid_retry_seed: false}\nenv: {max_turns: 1}\n", nil},
		{"unknown api", base + "generate: {api: batches}\n", []string{`generate.api: "batches" is not one of chat, completions, tokens, batch`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml), "cfg.yaml", nil)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error, got %+v", cfg.Generate)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBatchDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(base+"generate: {endpoints: [\"http://h:8000/v1\"], api: batch}\nenv: {max_turns: 1}\n"), "cfg.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Generate
	if g.Concurrency != 1000 || g.Batch.MaxRequests != 50000 || g.Batch.MaxBytes != 100_000_000 || g.Batch.CompletionWindow != "24h" {
		t.Fatalf("defaults: concurrency %d, batch %+v", g.Concurrency, g.Batch)
	}
}
