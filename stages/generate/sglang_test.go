package generate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// nativeRecorder wraps the simulator's HTTP handler and records every
// /generate request (SGLang's native API): its input_ids, rid and
// priority, and the output_ids and finish type answered.
type nativeRecorder struct {
	h        http.Handler
	mu       sync.Mutex
	prompts  [][]int32
	rids     []string
	answers  [][]int32
	finish   []string
	priority []*int64
	aborts   []string // the /abort_request bodies
}

func (rec *nativeRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/abort_request" {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.aborts = append(rec.aborts, string(body))
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if r.URL.Path != "/generate" {
		rec.h.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		InputIDs []int32 `json:"input_ids"`
		RID      string  `json:"rid"`
		Priority *int64  `json:"priority"`
	}
	_ = json.Unmarshal(body, &req)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec.mu.Lock()
	rec.prompts = append(rec.prompts, req.InputIDs)
	rec.rids = append(rec.rids, req.RID)
	rec.priority = append(rec.priority, req.Priority)
	rec.mu.Unlock()
	cw := &captured{ResponseWriter: w}
	rec.h.ServeHTTP(cw, r)
	var out struct {
		OutputIDs []int32 `json:"output_ids"`
		MetaInfo  struct {
			FinishReason struct {
				Type string `json:"type"`
			} `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if json.Unmarshal(cw.buf.Bytes(), &out) == nil {
		rec.mu.Lock()
		rec.answers = append(rec.answers, out.OutputIDs)
		rec.finish = append(rec.finish, out.MetaInfo.FinishReason.Type)
		rec.mu.Unlock()
	}
}

// Under generate.api: sglang a rollout paused mid-generation in abort mode
// (POST /abort_request) and resumed continues token-in-token-out, as in
// generate.api: tokens: the continuation's input_ids are the first prompt
// and the partial output_ids, the row is that and the continuation's
// output_ids, each request has its own rid and the request's priority, and
// the pause aborts the request by its rid. The model is a MoE one asked
// for its routes: the row's are the continuation's, which routed the
// first prompt and the partial answer again, over every position but the
// last.
func TestSGLangAbortContinuesTokenInTokenOut(t *testing.T) {
	moe := sim.MoE{Layers: 2, Experts: 8, TopK: 2}
	srv := sim.New(sim.Options{Seed: 7, TimeScale: 1, A: time.Millisecond, C: time.Nanosecond, P: time.Nanosecond,
		Length: sim.LengthModel{Median: 400, Sigma: 0.01, Cap: 2000}, MoE: moe})
	defer srv.Close()
	rec := &nativeRecorder{h: srv.Handler()}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{hs.URL + "/v1"}, Model: "sim", API: inference.APISGLang, Concurrency: 4, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pol := generate.NewPolicy(1)
	g, err := generate.New(c, generate.Options{Model: "sim", API: inference.APISGLang, Policy: pol,
		Params:        map[string]any{"max_tokens": 1500, "logprobs": 1, "priority": 3},
		RoutedExperts: true, RoutedExpertsLayers: moe.Layers})
	if err != nil {
		t.Fatal(err)
	}
	r := rollout()
	r.Task.Params = nil
	done := make(chan error, 1)
	go func() { done <- g.Turn(context.Background(), r) }()
	time.Sleep(100 * time.Millisecond) // some tokens in
	abortUpdate(t, pol, "the partial answer", func() bool { return g.PolicyStats().Continued == 1 }, 2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.Status != "" && r.Status != pipeline.StatusOK {
		t.Fatalf("rollout %s: %s", r.Status, r.Error)
	}
	st := g.PolicyStats()
	if st.Aborted != 1 || st.Continued != 1 || st.ContinuedTokens == 0 || st.Discarded != 0 {
		t.Fatalf("stats %+v", st)
	}
	p, k := int32(len(r.PromptTokenIDs)), int32(st.ContinuedTokens)
	end := p + int32(len(r.ResponseTokenIDs))
	want := []pipeline.VersionSpan{span(1, 1, p, p+k), span(2, 2, p+k, end)}
	if !slices.Equal(r.PolicyVersions, want) {
		t.Fatalf("spans %v, want %v", r.PolicyVersions, want)
	}
	if k < 10 || p+k >= end {
		t.Fatalf("the pause cut at %d of %d..%d", p+k, p, end)
	}
	if len(r.LossMask) != len(r.ResponseTokenIDs) || slices.Contains(r.LossMask, 0) || slices.Contains(r.ResponseLogprobs, 0) {
		t.Errorf("loss mask or logprobs lost: mask %v", r.LossMask)
	}
	if r.CompletionTokens != len(r.ResponseTokenIDs) || r.FinishReason != "stop" {
		t.Errorf("completion tokens %d of %d, finish %q", r.CompletionTokens, len(r.ResponseTokenIDs), r.FinishReason)
	}
	waitFor(t, "the server's record", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.answers) >= 2
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.prompts) != 2 || len(rec.answers) != 2 {
		t.Fatalf("the server saw %d requests, answered %d", len(rec.prompts), len(rec.answers))
	}
	seq := r.Tokens()
	if !slices.Equal(rec.prompts[0], seq[:p]) || rec.finish[0] != "abort" || !slices.Equal(rec.answers[0], seq[p:p+k]) {
		t.Errorf("first request: prompt %v answer %v (%s), row %v", rec.prompts[0], rec.answers[0], rec.finish[0], seq[:p+k])
	}
	if !slices.Equal(rec.prompts[1], seq[:p+k]) || !slices.Equal(rec.answers[1], seq[p+k:]) || rec.finish[1] != "stop" {
		t.Errorf("continuation: prompt %v answer %v (%s), row %v", rec.prompts[1], rec.answers[1], rec.finish[1], seq)
	}
	if r.Routes == nil || r.Routes.Positions() != len(seq)-1 {
		t.Fatalf("routes %v over %d positions", r.Routes, len(seq))
	}
	for q := range len(seq) - 1 {
		if want := moe.Route(nil, 7, q, seq[q]); !slices.Equal(r.Routes.At(q), want) {
			t.Fatalf("position %d: experts %v, the router's %v", q, r.Routes.At(q), want)
		}
	}
	if rec.rids[0] == "" || rec.rids[0] == rec.rids[1] {
		t.Errorf("rids %q", rec.rids)
	}
	// The pause aborted the request by its rid, not every request of the
	// server.
	if want := `{"rid":"` + rec.rids[0] + `"}`; !slices.Equal(rec.aborts, []string{want}) {
		t.Errorf("abort_request bodies %q, want %q", rec.aborts, want)
	}
	for i, pr := range rec.priority {
		if pr == nil || *pr != 3 {
			t.Errorf("request %d: priority %v, want 3", i, pr)
		}
	}
}

// alwaysGenerationPrompt is a /tokenize that, as SGLang's, renders every
// conversation with the generation prompt, whatever add_generation_prompt
// says.
func alwaysGenerationPrompt(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			var body map[string]any
			data, _ := io.ReadAll(r.Body)
			if json.Unmarshal(data, &body) == nil {
				if _, ok := body["messages"]; ok {
					body["add_generation_prompt"] = true
				}
				data, _ = json.Marshal(body)
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
			r.ContentLength = int64(len(data))
		}
		h.ServeHTTP(w, r)
	})
}

// The start-up check stops a run whose server's /tokenize cannot render a
// conversation without the generation prompt (SGLang's), unless the
// observations are tokenized raw; a server that honours it passes.
func TestCheckGenerationPrompt(t *testing.T) {
	srv := sim.New(sim.Options{Seed: 7})
	defer srv.Close()
	for _, tt := range []struct {
		name    string
		always  bool
		obs     string
		wantErr bool
	}{
		{"honoured", false, "", false},
		{"always", true, "", true},
		{"always, template", true, "template", true},
		{"always, raw", true, "raw", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := srv.Handler()
			if tt.always {
				h = alwaysGenerationPrompt(h)
			}
			hs := httptest.NewServer(h)
			defer hs.Close()
			c, err := openai.NewHTTP(inference.Config{Endpoints: []string{hs.URL + "/v1"}, Model: "sim", API: inference.APISGLang, Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			g, err := generate.New(c, generate.Options{Model: "sim", API: inference.APISGLang, ObservationTokens: tt.obs})
			if err != nil {
				t.Fatal(err)
			}
			err = g.Check(context.Background())
			if tt.wantErr != (err != nil) || err != nil && !strings.Contains(err.Error(), "env.observation_tokens: raw") {
				t.Fatalf("Check: %v, want an error %v", err, tt.wantErr)
			}
		})
	}
}

// With a /tokenize that always appends the generation prompt (SGLang's),
// generate.api: sglang with env.observation_tokens: raw passes the
// start-up check and runs token-in-token-out: the first prompt is the
// template's rendering, the observation its texts' raw ids, and each
// /generate request's input_ids and output_ids are the row's sequence.
func TestSGLangRawObservations(t *testing.T) {
	srv := sim.New(sim.Options{Seed: 4})
	defer srv.Close()
	rec := &nativeRecorder{h: alwaysGenerationPrompt(srv.Handler())}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{hs.URL + "/v1"}, Model: "sim", API: inference.APISGLang, Concurrency: 1, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := generate.New(c, generate.Options{Model: "sim", API: inference.APISGLang, ObservationTokens: "raw", Params: map[string]any{"max_tokens": 5, "seed": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := longRollout(6)
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	obs := pipeline.Message{Role: pipeline.RoleUser, Content: "Wrong. Try again.", Turn: 1}
	r.Messages = append(r.Messages, obs)
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.Status == pipeline.StatusError || r.NumTurns != 2 {
		t.Fatalf("rollout %s (%d turns): %s", r.Status, r.NumTurns, r.Error)
	}
	row := r.Tokens()
	if want := (sim.Template{}).Render(r.Messages[:1], nil, true); !slices.Equal(r.PromptTokenIDs, want) {
		t.Fatalf("first prompt %q, want %q", sim.Detokenize(r.PromptTokenIDs, false), sim.Detokenize(want, false))
	}
	if span := row[r.Messages[2].TokenStart:r.Messages[2].TokenEnd]; !slices.Equal(span, sim.Tokenize(obs.Content)) {
		t.Fatalf("observation ids %q", sim.Detokenize(span, false))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	n := len(rec.prompts)
	if n < 2 || len(rec.answers) != n {
		t.Fatalf("%d requests, %d answers", n, len(rec.answers))
	}
	// The last two requests are the rollout's turns (the check's probe
	// came first).
	for i := n - 2; i < n; i++ {
		if seq := slices.Concat(rec.prompts[i], rec.answers[i]); !slices.Equal(seq, row[:len(seq)]) {
			t.Fatalf("request %d: %q is not a prefix of the row %q", i, sim.Detokenize(seq, false), sim.Detokenize(row, false))
		}
	}
	if last := slices.Concat(rec.prompts[n-1], rec.answers[n-1]); len(last) != len(row) {
		t.Fatalf("the last request holds %d ids, the row %d", len(last), len(row))
	}
}
