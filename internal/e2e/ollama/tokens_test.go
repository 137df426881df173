package ollama

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
)

// statsJSON is what the tests read of `trajflow stats --json` (the shape
// of metrics.json).
type statsJSON struct {
	Rows   int64 `json:"rows"`
	Tokens struct {
		Prompt     struct{ Total int64 }  `json:"prompt"`
		Completion struct{ Total int64 }  `json:"completion"`
		Env        *struct{ Total int64 } `json:"env"`
	} `json:"tokens"`
	MeanGen   *float64 `json:"mean_gen_tokens_per_sample"`
	MeanEnv   *float64 `json:"mean_env_tokens_per_sample"`
	MeanTotal *float64 `json:"mean_total_tokens_per_sample"`
	Unknown   int64    `json:"token_counts_unknown"`
	PerTurn   []struct {
		Turn           int    `json:"turn"`
		ActiveSamples  int64  `json:"active_samples"`
		GenTokens      *int64 `json:"gen_tokens"`
		UnknownSamples int64  `json:"unknown_samples"`
	} `json:"per_turn"`
}

// TestOllamaStatsUnknownCounts: Ollama answers chat completions without
// token ids (logprobs it does send, with logprobs: true). The rows' token
// counts are the engine's usage (prompt_tokens, completion_tokens), their
// training-view counts null, not 0, and the logprobs not kept; `trajflow
// stats` (and metrics.json) shows the engine's counts and says the
// training view's are unknown.
func TestOllamaStatsUnknownCounts(t *testing.T) {
	e := sharedEngine(t)
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	const tasks, n = 4, 2
	cfg := writeConfig(t, dir, "run.yaml", config{tasks: mathTasks(t, dir, tasks), out: out, endpoint: rec.url, model: "tiny", n: n,
		params: ", logprobs: true"})
	res := trajflow(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	rs := rows(t, out, tasks, n)
	checkUsage(t, rs, rec.exchanges())
	for _, r := range rs {
		if !r.TokenIDsMissing || len(r.ResponseLogprobs) != 0 || len(r.ResponseTokenIDs) != 0 {
			t.Errorf("task %d rollout %d: gen_tokens null %v, %d logprobs, %d response ids; want null and none",
				r.Task.Index, r.RolloutIndex, r.TokenIDsMissing, len(r.ResponseLogprobs), len(r.ResponseTokenIDs))
		}
	}
	var prompt, completion int64
	for _, x := range rec.exchanges() {
		prompt += int64(x.Response.Usage.PromptTokens)
		completion += int64(x.Response.Usage.CompletionTokens)
		if !strings.Contains(x.RawResponse, `"logprob"`) {
			t.Errorf("the engine sent no logprobs (logprobs: true): %.300s", x.RawResponse)
		}
	}

	st := trajflow(t, "stats", "--json", out)
	if st.code != 0 {
		t.Fatalf("stats --json: exit %d:\n%s", st.code, st.stderr)
	}
	fromFile, err := os.ReadFile(filepath.Join(out, "metrics.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"stats --json": st.stdout, "metrics.json": string(fromFile)} {
		var m statsJSON
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, data)
		}
		if m.Tokens.Prompt.Total != prompt || m.Tokens.Completion.Total != completion {
			t.Errorf("%s: prompt tokens %d, completion tokens %d; the engine's usage: %d, %d",
				name, m.Tokens.Prompt.Total, m.Tokens.Completion.Total, prompt, completion)
		}
		if m.Unknown != tasks*n || m.MeanGen != nil || m.MeanEnv != nil || m.MeanTotal != nil || m.Tokens.Env != nil {
			t.Errorf("%s: token_counts_unknown %d (want %d), means %v %v %v, env tokens %v: want null",
				name, m.Unknown, tasks*n, m.MeanGen, m.MeanEnv, m.MeanTotal, m.Tokens.Env)
		}
		if len(m.PerTurn) != 1 || m.PerTurn[0].GenTokens != nil || m.PerTurn[0].UnknownSamples != tasks*n {
			t.Errorf("%s: per_turn %+v; want gen_tokens null, %d unknown samples", name, m.PerTurn, tasks*n)
		}
	}
	st = trajflow(t, "stats", out)
	if st.code != 0 {
		t.Fatalf("stats: exit %d:\n%s", st.code, st.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("completion tokens  %.2f", float64(completion)/tasks/n),
		"gen unknown  env unknown  total unknown",
		fmt.Sprintf("(%d of %d rows unknown: no token ids", tasks*n, tasks*n),
	} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("stats lacks %q:\n%s", want, st.stdout)
		}
	}
	t.Logf("stats:\n%s", st.stdout)
}

// TestOllamaMaxSeqLen: a chat-mode conversation with the engine under
// env.max_seq_len. Ollama reports no token ids, so the bound is measured
// with its usage (each turn's prompt_tokens + completion_tokens, the
// length of the sequence as the engine counted it): no row has a turn over
// the bound without being marked truncated, and the conversations do
// reach it.
func TestOllamaMaxSeqLen(t *testing.T) {
	e := sharedEngine(t)
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// The first prompt is 115 tokens (the guess environment's
	// instructions included): the bound falls a few turns in.
	const maxSeqLen = 200
	tasks := writeFile(t, dir, "tasks.jsonl", `{"id": "g0", "low": 1, "high": 20}`+"\n"+`{"id": "g1", "low": 1, "high": 50}`+"\n")
	cfg := writeConfig(t, dir, "run.yaml", config{
		tasks: tasks, out: out, endpoint: rec.url, model: "tiny", n: 2, maxTokens: 16,
		prompt: `{system: "Reply with one number per turn.", user: "I picked a whole number between {low} and {high}. Guess it."}`,
		env:    fmt.Sprintf("{name: guess, max_guesses: 8, max_turns: 8, max_seq_len: %d}", maxSeqLen),
	})
	res := trajflow(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	rs := rows(t, out, 2, 2)
	checkUsage(t, rs, rec.exchanges())
	usage := usageByTurn(t, rec.exchanges())
	truncated, multi := 0, 0
	for _, r := range rs {
		if r.Status != pipeline.StatusOK {
			t.Errorf("task %d rollout %d: status %q: %s", r.Task.Index, r.RolloutIndex, r.Status, r.Error)
		}
		longest := 0
		for i, m := range r.Messages {
			if m.Role == "assistant" {
				u := usage[messageKey(r.Messages[:i], m)]
				longest = max(longest, u[0]+u[1])
			}
		}
		if longest > maxSeqLen && !r.Truncated {
			t.Errorf("task %d rollout %d: a turn measured %d tokens (usage), max_seq_len %d, and the row is not truncated",
				r.Task.Index, r.RolloutIndex, longest, maxSeqLen)
		}
		if r.Truncated {
			truncated++
			if r.NumTurns > 1 {
				multi++
			}
		}
		t.Logf("task %d rollout %d: %d turns, longest turn %d tokens (usage), truncated %v, finish %q",
			r.Task.Index, r.RolloutIndex, r.NumTurns, longest, r.Truncated, r.FinishReason)
	}
	if truncated == 0 || multi == 0 {
		t.Errorf("%d conversations reached max_seq_len %d, %d of them after more than one turn: the test does not test the bound", truncated, maxSeqLen, multi)
	}
}

// TestOllamaContextLength: a model whose context (PARAMETER num_ctx) a
// prompt passes. Ollama cuts such a prompt and answers 200; trajflow
// learns the context (Ollama's /api/ps) and makes the row an error of
// class context_length, not an ok row; a prompt that fits is answered.
func TestOllamaContextLength(t *testing.T) {
	e := sharedEngine(t)
	const numCtx = 256
	if err := e.derive("tiny-ctx", "tiny", fmt.Sprintf("PARAMETER num_ctx %d", numCtx), "PARAMETER num_thread 1"); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	long := strings.Repeat("What is 12 + 30? ", 120) // about 1,000 tokens
	tasks := writeFile(t, dir, "tasks.jsonl",
		`{"id": "short", "question": "What is 2 + 3?", "expected_answer": "5"}`+"\n"+
			`{"id": "long", "question": "`+long+`", "expected_answer": "42"}`+"\n")
	cfg := writeConfig(t, dir, "run.yaml", config{tasks: tasks, out: out, endpoint: rec.url, model: "tiny-ctx", n: 1})
	res := trajflow(t, "run", cfg)
	var all []*pipeline.Rollout
	for _, sub := range []string{"data", "errors"} {
		if _, err := os.Stat(filepath.Join(out, sub)); err != nil {
			continue
		}
		rs, err := readback.Dir(filepath.Join(out, sub))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rs...)
	}
	byTask := map[int64]*pipeline.Rollout{}
	for _, r := range all {
		byTask[r.Task.Index] = r
	}
	if r := byTask[0]; r == nil || r.Status != pipeline.StatusOK {
		t.Errorf("the short prompt: %+v, want an ok row\n%s", r, res.stderr)
	}
	r := byTask[1]
	if r == nil || r.Status != pipeline.StatusError || r.ErrorClass != "context_length" {
		t.Fatalf("the long prompt: row %+v, want an error row of class context_length (exit %d)\n%s\nengine log:\n%s", r, res.code, res.stderr, e.log())
	}
	if r.NumTurns != 0 || !strings.Contains(r.Error, "cut the prompt") {
		t.Errorf("the long prompt: %d turns, error %q", r.NumTurns, r.Error)
	}
	cut := false
	for _, x := range rec.exchanges() {
		if x.Status == 200 && x.Response.Usage.PromptTokens >= numCtx {
			cut = true
		}
	}
	if !cut {
		t.Errorf("no answer of the engine reported its whole context (%d) as prompt_tokens: it did not cut", numCtx)
	}
	t.Logf("exit %d; the long prompt's row: %s", res.code, r.Error)
}
