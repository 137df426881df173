package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	simenv "github.com/trajflow/trajflow/envs/sim"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/loop"
)

// recorder wraps the simulator's HTTP handler and keeps, per request seed,
// every generation's prompt ids followed by its completion ids, as the
// server saw and produced them.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	seqs map[int64][][]int32
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	cw := httptest.NewRecorder()
	rec.next.ServeHTTP(cw, r)
	// Record before answering: once answered, the client may send the
	// trajectory's next request, which must be recorded after this one.
	rec.record(r.URL.Path, cw, body)
	for k, v := range cw.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(cw.Code)
	_, _ = w.Write(cw.Body.Bytes())
}

func (rec *recorder) record(path string, cw *httptest.ResponseRecorder, body []byte) {
	if path == "/tokenize" || cw.Code != http.StatusOK {
		return
	}
	if path == "/generate" {
		rec.recordNative(cw, body)
		return
	}
	var req struct {
		Seed *int64 `json:"seed"`
	}
	var resp struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Choices        []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &req) != nil || req.Seed == nil || json.Unmarshal(cw.Body.Bytes(), &resp) != nil || len(resp.Choices) == 0 {
		return
	}
	rec.mu.Lock()
	rec.seqs[*req.Seed] = append(rec.seqs[*req.Seed], slices.Concat(resp.PromptTokenIDs, resp.Choices[0].TokenIDs))
	rec.mu.Unlock()
}

// trailerEnv plays the simulator's trailer: an observation of obs_tokens
// words while turns are left, then a final observation, terminating.
type trailerEnv struct{}

func (trailerEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (trailerEnv) Step(_ context.Context, r *pipeline.Rollout, _ pipeline.Message) (*envs.Step, error) {
	tr, err := simenv.ReadTrailer(r.Extra)
	if err != nil {
		return nil, err
	}
	if tr.TurnsLeft == 0 {
		return &envs.Step{Terminated: true, Reward: 1, Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: "final: well done"}}}, nil
	}
	return &envs.Step{Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: simenv.Observation(tr.ObsTokens)}}}, nil
}

// runTokens runs 16 multi-turn rollouts (3 to 6 turns) against the
// simulator's HTTP server, whose chat template strips earlier reasoning,
// with the given API and max_seq_len.
func runTokens(t *testing.T, api inference.API, maxSeqLen, maxTokens int) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	out, seqs := runTokensRaw(t, api, maxSeqLen, maxTokens)
	for _, r := range out {
		if r.Status != pipeline.StatusOK {
			t.Fatalf("%s: %s %s", r, r.Status, r.Error)
		}
		n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if len(r.LossMask) != len(r.ResponseTokenIDs) || len(r.ResponseLogprobs) != len(r.ResponseTokenIDs) {
			t.Fatalf("%s: %d ids, %d mask, %d logprobs", r, len(r.ResponseTokenIDs), len(r.LossMask), len(r.ResponseLogprobs))
		}
		for _, m := range r.Messages {
			if m.TokenStart > m.TokenEnd || int(m.TokenEnd) > n {
				t.Fatalf("%s: span [%d, %d) outside %d tokens", r, m.TokenStart, m.TokenEnd, n)
			}
		}
	}
	return out, seqs
}

// runTokensRaw is runTokens without its checks of each rollout.
func runTokensRaw(t *testing.T, api inference.API, maxSeqLen, maxTokens int) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	return runTokensMoE(t, api, maxSeqLen, maxTokens, sim.MoE{}, false)
}

// runTokensMoE is runTokensRaw against a simulated model of the given
// MoE shape, asking for routed experts when routed.
func runTokensMoE(t *testing.T, api inference.API, maxSeqLen, maxTokens int, moe sim.MoE, routed bool) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	s := sim.New(sim.Options{Seed: 7, Preset: "agent", MinTurns: 3, MaxTurns: 6, ObsTokens: 40, StripReasoning: true, MoE: moe})
	defer s.Close()
	rec := &recorder{next: s.Handler(), seqs: map[int64][][]int32{}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "sim", API: api, Concurrency: 4, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gen, err := generate.New(c, generate.Options{Model: "sim", API: api, MaxSeqLenOf: generate.SeqLen(maxSeqLen),
		Params:        map[string]any{"max_tokens": maxTokens, "logprobs": true, "return_token_ids": true},
		RoutedExperts: routed, RoutedExpertsLayers: moe.Layers})
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rs []*pipeline.Rollout
	for i := range 16 {
		task := &pipeline.Task{Index: int64(i / 2), Messages: []pipeline.Message{{Role: "user", Content: fmt.Sprintf("What is %d + %d?", i/2, 3)}}}
		rs = append(rs, &pipeline.Rollout{Task: task, GroupSize: 2, RolloutIndex: i % 2, GroupID: fmt.Sprintf("t%d", i/2), Seed: int64(i), Messages: slices.Clone(task.Messages)})
	}
	g := pipeline.NewGraph()
	src := pipeline.NewSource(g, "src", 0, func(ctx context.Context, emit func(*pipeline.Rollout) error) error {
		for _, r := range rs {
			if err := emit(r); err != nil {
				return err
			}
		}
		return nil
	})
	l := loop.New(g, "loop", gen, envstep.New(trailerEnv{}, "trailer", envstep.Limits{}), loop.Options{GenWorkers: 4, EnvWorkers: 2, Timeout: 30 * time.Second})
	var out []*pipeline.Rollout
	src.Via(l).To(pipeline.NewSink(g, "out", 0, func(_ context.Context, r *pipeline.Rollout) error {
		out = append(out, r)
		return nil
	}, nil))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(rs) {
		t.Fatalf("%d rollouts out of %d", len(out), len(rs))
	}
	return out, rec.seqs
}

func isPrefix(p, s []int32) bool { return len(p) <= len(s) && slices.Equal(p, s[:len(p)]) }

// TestTokensModeIsExact: with api: tokens and a template that strips
// earlier reasoning, no continuity breaks, and every request's prompt and
// completion ids are a prefix of the row's sequence; every observation,
// the last one included, has its ids (mask 0) and every generated id is
// mask 1.
func TestTokensModeIsExact(t *testing.T) {
	for _, maxTokens := range []int{64, 1024} { // most replies cut; most finished
		t.Run(fmt.Sprint(maxTokens), func(t *testing.T) { tokensModeIsExact(t, inference.APITokens, maxTokens) })
	}
}

func tokensModeIsExact(t *testing.T, api inference.API, maxTokens int) {
	out, seqs := runTokens(t, api, 0, maxTokens)
	for _, r := range out {
		if r.TokenContinuityBreaks != 0 {
			t.Errorf("%s: %d continuity breaks", r, r.TokenContinuityBreaks)
		}
		if r.NumTurns < 3 || r.NumTurns > 6 || !r.Terminated {
			t.Errorf("%s: %d turns, terminated %v", r, r.NumTurns, r.Terminated)
		}
		row := r.Tokens()
		reqs := seqs[r.Seed]
		if len(reqs) != r.NumTurns {
			t.Fatalf("%s: %d requests recorded, %d turns", r, len(reqs), r.NumTurns)
		}
		generated := 0
		for i, q := range reqs {
			if !isPrefix(q, row) {
				t.Fatalf("%s: request %d (%d ids) is not a prefix of the row (%d ids)", r, i, len(q), len(row))
			}
		}
		for _, m := range r.Messages {
			if m.Turn > 0 && m.TokenEnd <= m.TokenStart {
				t.Fatalf("%s: %s message of turn %d has no tokens", r, m.Role, m.Turn)
			}
			if m.Role == pipeline.RoleAssistant {
				generated += int(m.TokenEnd - m.TokenStart)
				for k := m.TokenStart; k < m.TokenEnd; k++ {
					if r.LossMask[int(k)-len(r.PromptTokenIDs)] != 1 {
						t.Fatalf("%s: generated token %d has mask 0", r, k)
					}
				}
			}
		}
		ones := 0
		for _, v := range r.LossMask {
			ones += int(v)
		}
		if ones != generated || r.EnvTokens != len(r.LossMask)-ones || r.EnvTokens == 0 {
			t.Fatalf("%s: mask ones %d, generated %d, env tokens %d", r, ones, generated, r.EnvTokens)
		}
		// Every turn is closed as the template closes it, whether the
		// reply finished or was cut: the row is the template's rendering
		// of the whole conversation (one that keeps earlier reasoning).
		if want := (sim.Template{}).Render(r.Messages, r.Tools, true); !slices.Equal(row, want) {
			t.Fatalf("%s: the row is not the template's rendering of its messages:\nrow  %q\nwant %q", r, sim.Detokenize(row, false), sim.Detokenize(want, false))
		}
		last := r.Messages[len(r.Messages)-1]
		if last.Role != pipeline.RoleUser || int(last.TokenEnd) != len(row) {
			t.Fatalf("%s: the last observation's span [%d, %d), row %d", r, last.TokenStart, last.TokenEnd, len(row))
		}
	}
}

// TestChatModeAfterReRenders: with api: chat the same run re-renders
// (breaks are counted) and each row still starts with its last request's
// prompt and completion ids.
func TestChatModeAfterReRenders(t *testing.T) {
	out, seqs := runTokens(t, "chat", 0, 1024)
	breaks := 0
	for _, r := range out {
		breaks += r.TokenContinuityBreaks
		reqs := seqs[r.Seed]
		if len(reqs) != r.NumTurns {
			t.Fatalf("%s: %d requests, %d turns", r, len(reqs), r.NumTurns)
		}
		if last := reqs[len(reqs)-1]; !isPrefix(last, r.Tokens()) {
			t.Fatalf("%s: the last request (%d ids) is not a prefix of the row (%d ids)", r, len(last), len(r.Tokens()))
		}
		if r.TokenContinuityBreaks > r.NumTurns-1 {
			t.Errorf("%s: %d breaks in %d turns", r, r.TokenContinuityBreaks, r.NumTurns)
		}
	}
	if breaks == 0 {
		t.Fatal("no re-render seen: the template does not strip reasoning")
	}
	t.Logf("%d rollouts, %d continuity breaks", len(out), breaks)
}

// TestMaxSeqLenIsExact: with max_seq_len 600 no row is longer, and the
// rows that reached the bound are exactly the truncated ones.
func TestMaxSeqLenIsExact(t *testing.T) {
	for _, api := range []inference.API{inference.APITokens, inference.APIChat} {
		t.Run(string(api), func(t *testing.T) {
			out, seqs := runTokens(t, api, 600, 200)
			hit := 0
			for _, r := range out {
				n := len(r.Tokens())
				if n > 600 {
					t.Fatalf("%s: %d tokens", r, n)
				}
				if (n == 600) != r.Truncated {
					t.Fatalf("%s: %d tokens, truncated %v", r, n, r.Truncated)
				}
				if r.Truncated {
					hit++
				}
				if api == "tokens" {
					for i, q := range seqs[r.Seed] {
						if !isPrefix(q, r.Tokens()) {
							t.Fatalf("%s: request %d not a prefix", r, i)
						}
					}
				}
			}
			if hit == 0 {
				t.Fatal("no row reached max_seq_len: the test does not exercise it")
			}
			t.Logf("%d of %d rows reached max_seq_len and are truncated", hit, len(out))
		})
	}
}

// TestFirstPromptOverMaxSeqLen: a first prompt that leaves no room under
// max_seq_len is a prompt_too_long error row, never an ok row of 0 turns.
func TestFirstPromptOverMaxSeqLen(t *testing.T) {
	for _, api := range []inference.API{inference.APITokens, inference.APIChat} {
		t.Run(string(api), func(t *testing.T) {
			out, _ := runTokensRaw(t, api, 4, 200)
			if len(out) == 0 {
				t.Fatal("no rollouts")
			}
			for _, r := range out {
				if r.Status != pipeline.StatusError || r.ErrorClass != generate.ClassPromptTooLong || r.NumTurns != 0 ||
					!strings.Contains(r.Error, "max_seq_len 4") {
					t.Fatalf("%s: status %q class %q turns %d error %q", r, r.Status, r.ErrorClass, r.NumTurns, r.Error)
				}
			}
		})
	}
}
