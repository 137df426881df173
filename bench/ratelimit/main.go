// Command ratelimit runs a `trajflow run` child process over an OpenAI
// Batch file (source.format openai_batch) against a provider-shaped server
// at its exact limits (inference/ratelimit/ratelimittest: each request
// counts its prompt plus its max_tokens, buckets refilled continuously),
// with generate.rate_limit at those limits, and reports the 429s, the
// rate_limited rows and the share of the binding limit used.
//
//	go run ./bench/ratelimit                      # 300 requests, 600 req/min, 30,000 tok/min
//	go run ./bench/ratelimit -requests 100 -rpm 6000 -tpm 300000
//	go run ./bench/ratelimit -limit=false         # without generate.rate_limit
//	go run ./bench/ratelimit -key input_tokens_per_minute  # the prompt alone counted
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	_ "github.com/trajflow/trajflow/envs/builtin" // the none environment
	"github.com/trajflow/trajflow/inference/ratelimit/ratelimittest"
)

func main() { harness.Main(run) }

const configYAML = `run: {progress: 0}
source: {path: %q, format: openai_batch}
generate:
  endpoints: [%q]
  model: provider-model
  concurrency: 64
  max_attempts: 5
%s
env: {name: none}
output: {dir: %q}
`

var errorsRe = regexp.MustCompile(`errors by class: (.+)`)
var stopRe = regexp.MustCompile(`(?m)^stopped.*$`)

// writeBatch writes n Batch lines, each a prompt of about 50 tokens as
// the server counts them, asking for maxTokens.
func writeBatch(path string, n, maxTokens int) error {
	var b strings.Builder
	for i := 0; i < n; i++ {
		line, err := json.Marshal(map[string]any{
			"custom_id": fmt.Sprintf("req-%04d", i), "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "provider-model", "max_tokens": maxTokens,
				"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Question %d: what is %d plus %d? Answer with the number alone, please, no words.", i, i, 2*i)}}},
		})
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("requests", 300, "Batch lines")
	rpm := fs.Int("rpm", 600, "the server's and generate.rate_limit's requests per minute")
	tpm := fs.Int("tpm", 30000, "the server's and generate.rate_limit's tokens per minute (prompt plus max_tokens)")
	maxTokens := fs.Int("max-tokens", 60, "each line's max_tokens")
	window := fs.Duration("window", time.Second, "how much of a minute's rate the server's buckets hold")
	limit := fs.Bool("limit", true, "set generate.rate_limit at the server's limits")
	key := fs.String("key", "tokens_per_minute", "the generate.rate_limit key given the token limit (input_tokens_per_minute: counting the prompt alone)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "ratelimit:", err); return 1 }
	dir, err := os.MkdirTemp("", "trajflow-bench-ratelimit-")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory
	input := filepath.Join(dir, "batch.jsonl")
	if err := writeBatch(input, *n, *maxTokens); err != nil {
		return fail(err)
	}
	p := ratelimittest.Start(ratelimittest.Options{RequestsPerMinute: *rpm, TokensPerMinute: *tpm, Window: *window})
	defer p.Close()
	gen := "  # no generate.rate_limit"
	if *limit {
		gen = fmt.Sprintf("  rate_limit: {requests_per_minute: %d, %s: %d}", *rpm, *key, *tpm)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, configYAML, input, p.URL, gen, filepath.Join(dir, "out")), 0o644); err != nil {
		return fail(err)
	}
	cr, err := harness.RunChild(ctx, cfg)
	if m := stopRe.FindString(cr.Stdout); m != "" {
		fmt.Fprintln(stdout, m)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fail(err)
	}
	st := p.Stats()
	errs := "none"
	if m := errorsRe.FindStringSubmatch(cr.Stdout); m != nil {
		errs = m[1]
	}
	// The rate the limits allow: the binding one, in tokens a minute.
	allowTPM := float64(*tpm)
	if *tpm == 0 || float64(*rpm)*float64(st.Tokens)/float64(max(st.Answered, 1)) < allowTPM {
		allowTPM = float64(*rpm) * float64(st.Tokens) / float64(max(st.Answered, 1))
	}
	fmt.Fprintf(stdout, "%d Batch lines (openai_batch), server at %d req/min and %d tok/min (prompt + max_tokens, a %s bucket), generate.rate_limit %v (%s)\n\n", *n, *rpm, *tpm, *window, *limit, *key)
	fmt.Fprintln(stdout, "| requests sent | 429s | 429 share | answered | error rows | wall s | tok/min | req/min | binding limit used |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	fmt.Fprintf(stdout, "| %d | %d | %.1f%% | %d | %s | %.1f | %.0f | %.0f | %.1f%% |\n", st.Requests, st.Refused, 100*float64(st.Refused)/float64(max(st.Requests, 1)),
		st.Answered, errs, cr.Wall.Seconds(), st.TokensPerMinute(), st.RequestsPerMinute(), 100*st.TokensPerMinute()/allowTPM)
	return 0
}
