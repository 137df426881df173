package runner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/ratelimit/ratelimittest"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// An OpenAI Batch file (source.format openai_batch) against a provider at
// its exact limits, counting each request as its prompt plus its
// max_tokens, with generate.rate_limit at those limits: under 2% of the
// requests answered 429 and no row rate_limited. At ten times OpenAI's
// 600 requests and 30,000 tokens a minute, to be short; bench/ratelimit
// runs 300 lines at OpenAI's rates (BENCHMARKS.md).
func TestOpenAIBatchFileAtTheProvidersLimits(t *testing.T) {
	const n, rpm, tpm = 150, 6000, 300000
	p := ratelimittest.Start(ratelimittest.Options{RequestsPerMinute: rpm, TokensPerMinute: tpm, Window: time.Second, Model: "m"})
	defer p.Close()
	var b strings.Builder
	for i := 0; i < n; i++ {
		line, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("req-%d", i), "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "m", "max_tokens": 60, "messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Question %d: what is %d plus %d? Answer with the number alone.", i, i, 2*i)}}}})
		b.Write(line)
		b.WriteByte('\n')
	}
	input := filepath.Join(t.TempDir(), "batch.jsonl")
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := batchConfig(t, input, strings.TrimSuffix(p.URL, "/v1"), "generate.concurrency=64", "generate.max_attempts=5",
		fmt.Sprintf("generate.rate_limit={requests_per_minute: %d, tokens_per_minute: %d}", rpm, tpm))
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("%d requests, %d answered 429; %.0f tokens a minute", st.Requests, st.Refused, st.TokensPerMinute())
	if len(sum.ErrorClasses) != 0 {
		t.Fatalf("error rows %v, want none", sum.ErrorClasses)
	}
	if rows := readBack(t, cfg.Output.Dir, schema.DataDir); len(rows) != n || st.Answered != n {
		t.Fatalf("%d rows, %d answered, want %d", len(rows), st.Answered, n)
	}
	if want := fmt.Sprintf("%d answered 429, %d of them sent again", st.Refused, st.Refused); st.Refused > 0 && !strings.Contains(sum.String(), want) {
		t.Fatalf("the summary lacks %q:\n%s", want, sum)
	}
	if float64(st.Refused) >= 0.02*float64(st.Requests) {
		t.Fatalf("%d of %d requests answered 429, want under 2%%", st.Refused, st.Requests)
	}
}
