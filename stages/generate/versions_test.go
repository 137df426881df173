package generate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// waitFor polls cond until it holds, failing t after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func span(v, vmax int64, start, end int32) pipeline.VersionSpan {
	return pipeline.VersionSpan{Version: v, VersionMax: vmax, Start: start, End: end}
}

// Without a policy every generated token is version 0 (an offline run),
// and the first turn records the sampling parameters sent.
func TestOfflineVersionZero(t *testing.T) {
	c := &scripted{resps: []*inference.Response{resp([]int32{1, 2}, []int32{10, 11}), resp([]int32{1, 2, 10, 11, 7}, []int32{20})}}
	g := newGen(c, map[string]any{"temperature": 1.0, "top_k": 5})
	r := rollout()
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	r.Messages = append(r.Messages, pipeline.Message{Role: "user", Content: "obs", Turn: 1})
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	want := []pipeline.VersionSpan{span(0, 0, 2, 4), span(0, 0, 5, 6)}
	if !slices.Equal(r.PolicyVersions, want) || r.AdmittedVersion != 0 || r.MinPolicyVersion() != 0 {
		t.Errorf("spans %v admitted %d min %d, want %v, 0, 0", r.PolicyVersions, r.AdmittedVersion, r.MinPolicyVersion(), want)
	}
	s := r.Sampling
	if s.Temperature == nil || *s.Temperature != 1.0 || s.TopK == nil || *s.TopK != 5 || s.MaxTokens == nil || *s.MaxTokens != 10 || s.TopP != nil {
		t.Errorf("sampling %+v", s)
	}
}

// After SetVersion(2) the tokens of later requests carry version 2.
func TestSetVersionTagsLaterTokens(t *testing.T) {
	c := &scripted{resps: []*inference.Response{resp([]int32{1, 2}, []int32{10, 11}), resp([]int32{1, 2, 10, 11, 7}, []int32{20, 21, 22})}}
	pol := generate.NewPolicy(1)
	g, err := generate.New(c, generate.Options{Model: "m", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	r := rollout()
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := pol.SetVersion(2); err != nil {
		t.Fatal(err)
	}
	r.Messages = append(r.Messages, pipeline.Message{Role: "user", Content: "obs", Turn: 1})
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	want := []pipeline.VersionSpan{span(1, 1, 2, 4), span(2, 2, 5, 8)}
	if !slices.Equal(r.PolicyVersions, want) {
		t.Errorf("spans %v, want %v", r.PolicyVersions, want)
	}
	if r.AdmittedVersion != 1 || r.MinPolicyVersion() != 1 {
		t.Errorf("admitted %d, min %d; want 1, 1", r.AdmittedVersion, r.MinPolicyVersion())
	}
}

// An answer without token ids (chat mode without return_token_ids) has no
// positions to tag, so no span: the row's min_policy_version is the
// version its request was sent under, not the one its rollout was
// admitted at. A rollout admitted at version 1 that waited out a pause
// while the version went to 3 was generated at 3: read as 1, a service
// with max_staleness 1 set every such group aside as stale.
func TestAnswerWithoutTokenIDsKeepsItsVersion(t *testing.T) {
	noIDs := &inference.Response{Message: pipeline.Message{Content: "x"}, FinishReason: "stop", CompletionTokens: 2}
	c := &scripted{resps: []*inference.Response{noIDs, noIDs}}
	pol := generate.NewPolicy(1)
	g, err := generate.New(c, generate.Options{Model: "m", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Pause(generate.PauseKeep); err != nil {
		t.Fatal(err)
	}
	r := rollout()
	done := make(chan error, 1)
	go func() { done <- g.Turn(context.Background(), r) }()
	// The turn is admitted at once and waits for the resume (a turn not
	// yet admitted when the version moves is admitted at 3: the row's
	// admitted_version, checked below, tells).
	time.Sleep(100 * time.Millisecond)
	if err := pol.SetVersion(3); err != nil {
		t.Fatal(err)
	}
	pol.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(r.PolicyVersions) != 0 || r.AdmittedVersion != 1 || r.MinPolicyVersion() != 3 {
		t.Fatalf("spans %v admitted %d min %d; want none, 1, 3", r.PolicyVersions, r.AdmittedVersion, r.MinPolicyVersion())
	}
	// A later turn under a newer version leaves the oldest.
	if err := pol.SetVersion(4); err != nil {
		t.Fatal(err)
	}
	r.Messages = append(r.Messages, pipeline.Message{Role: "user", Content: "obs", Turn: 1})
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.MinPolicyVersion() != 3 {
		t.Fatalf("after a turn at version 4: min %d, want 3", r.MinPolicyVersion())
	}
}

// gated answers each request once release is closed, and counts them.
type gated struct {
	mu      sync.Mutex
	n       int
	started chan struct{}
	release chan struct{}
}

func (c *gated) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	c.started <- struct{}{}
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return resp([]int32{1, 2}, []int32{10, 11, 12}), nil
}

// A request waits while the fleet is paused; one in flight across a
// weight update in keep mode records the range of versions it may have
// used, never a guess.
func TestKeepModeRecordsARange(t *testing.T) {
	c := &gated{started: make(chan struct{}, 4), release: make(chan struct{})}
	pol := generate.NewPolicy(1)
	g, err := generate.New(c, generate.Options{Model: "m", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Pause(generate.PauseKeep); err != nil {
		t.Fatal(err)
	}
	r := rollout()
	done := make(chan error, 1)
	go func() { done <- g.Turn(context.Background(), r) }()
	select {
	case <-c.started:
		t.Fatal("a request was sent while the fleet was paused")
	case <-time.After(50 * time.Millisecond):
	}
	pol.Resume()
	<-c.started
	// In flight: a weight update in keep mode.
	if err := pol.Pause(generate.PauseKeep); err != nil {
		t.Fatal(err)
	}
	if err := pol.SetVersion(3); err != nil {
		t.Fatal(err)
	}
	pol.Resume()
	close(c.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []pipeline.VersionSpan{span(1, 3, 2, 5)}; !slices.Equal(r.PolicyVersions, want) {
		t.Errorf("spans %v, want %v", r.PolicyVersions, want)
	}
	if st := g.PolicyStats(); st.Ranges != 1 || st.Aborted != 0 {
		t.Errorf("stats %+v", st)
	}
}

// recorder wraps the simulator's HTTP handler and records every
// completion request's prompt ids and the ids answered.
type recorder struct {
	h       http.Handler
	mu      sync.Mutex
	prompts [][]int32
	answers [][]int32
	finish  []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/completions" {
		rec.h.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Prompt []int32 `json:"prompt"`
	}
	_ = json.Unmarshal(body, &req)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec.mu.Lock()
	rec.prompts = append(rec.prompts, req.Prompt)
	rec.mu.Unlock()
	cw := &captured{ResponseWriter: w}
	rec.h.ServeHTTP(cw, r)
	var out struct {
		Choices []struct {
			TokenIDs     []int32 `json:"token_ids"`
			FinishReason string  `json:"finish_reason"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(cw.buf.Bytes(), &out)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(out.Choices) == 1 {
		rec.answers = append(rec.answers, out.Choices[0].TokenIDs)
		rec.finish = append(rec.finish, out.Choices[0].FinishReason)
	}
}

type captured struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (c *captured) Write(p []byte) (int, error) {
	c.buf.Write(p)
	return c.ResponseWriter.Write(p)
}

// slowSim is a simulator that generates about 400 tokens a request at a
// token a millisecond.
func slowSim() *sim.Server {
	return sim.New(sim.Options{Seed: 7, TimeScale: 1, A: time.Millisecond, C: time.Nanosecond, P: time.Nanosecond,
		Length: sim.LengthModel{Median: 400, Sigma: 0.01, Cap: 2000}})
}

// A rollout paused mid-generation in abort mode and resumed holds spans
// of both versions whose boundary falls exactly where the pause cut it,
// and its token ids are exactly what the server saw: the continuation's
// prompt is the first prompt and the partial answer, and the row is that
// prompt and the continuation's answer. Over HTTP (POST /abort_request)
// and in process.
func TestAbortContinuesTokenInTokenOut(t *testing.T) {
	for _, over := range []string{"http", "in-process"} {
		t.Run(over, func(t *testing.T) {
			srv := slowSim()
			defer srv.Close()
			var client inference.Client = srv
			var rec *recorder
			if over == "http" {
				rec = &recorder{h: srv.Handler()}
				hs := httptest.NewServer(rec)
				defer hs.Close()
				c, err := openai.NewHTTP(inference.Config{Endpoints: []string{hs.URL + "/v1"}, Model: "sim", API: "tokens", Concurrency: 4, MaxAttempts: 1}, openai.HTTPOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				client = c
			}
			pol := generate.NewPolicy(1)
			g, err := generate.New(client, generate.Options{Model: "sim", API: "tokens", Policy: pol,
				Params: map[string]any{"max_tokens": 1500, "logprobs": 1}})
			if err != nil {
				t.Fatal(err)
			}
			r := rollout()
			r.Task.Params = nil
			done := make(chan error, 1)
			go func() { done <- g.Turn(context.Background(), r) }()
			// Some tokens in (of 400 at 1 ms each): the request generating,
			// then a little more.
			waitFor(t, "the request to generate", func() bool { return srv.Stats().Running == 1 })
			time.Sleep(50 * time.Millisecond)
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
			t.Logf("cut at %d in %d..%d", p+k, p, end)
			if k < 10 || p+k >= end {
				t.Fatalf("the pause cut at %d of %d..%d", p+k, p, end)
			}
			if len(r.LossMask) != len(r.ResponseTokenIDs) || slices.Contains(r.LossMask, 0) || slices.Contains(r.ResponseLogprobs, 0) {
				t.Errorf("loss mask or logprobs lost: mask %v", r.LossMask)
			}
			if r.CompletionTokens != len(r.ResponseTokenIDs) || r.FinishReason != "stop" {
				t.Errorf("completion tokens %d of %d, finish %q", r.CompletionTokens, len(r.ResponseTokenIDs), r.FinishReason)
			}
			if rec == nil {
				return
			}
			// The handler records an answer after the client has it.
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
			if !slices.Equal(rec.prompts[0], seq[:p]) || rec.finish[0] != inference.FinishAbort || !slices.Equal(rec.answers[0], seq[p:p+k]) {
				t.Errorf("first request: prompt %v answer %v (%s), row %v", rec.prompts[0], rec.answers[0], rec.finish[0], seq[:p+k])
			}
			if !slices.Equal(rec.prompts[1], seq[:p+k]) || !slices.Equal(rec.answers[1], seq[p+k:]) {
				t.Errorf("continuation: prompt %v answer %v, row %v", rec.prompts[1], rec.answers[1], seq)
			}
		})
	}
}

// In chat mode an aborted turn cannot continue exactly: it is sent again
// from its start after the resume, and its tokens are the new version's.
func TestAbortChatRestartsTheTurn(t *testing.T) {
	srv := slowSim()
	defer srv.Close()
	pol := generate.NewPolicy(1)
	g, err := generate.New(srv, generate.Options{Model: "sim", Policy: pol, Params: map[string]any{"max_tokens": 1500}})
	if err != nil {
		t.Fatal(err)
	}
	r := rollout()
	r.Task.Params = nil
	done := make(chan error, 1)
	go func() { done <- g.Turn(context.Background(), r) }()
	// Pause once the request is generating (400 tokens at 1 ms each).
	waitFor(t, "the request to generate", func() bool { return srv.Stats().Running == 1 })
	abortUpdate(t, pol, "the aborted request", func() bool { return g.PolicyStats().Aborted == 1 }, 2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := g.PolicyStats()
	if st.Discarded == 0 || st.Continued != 0 {
		t.Errorf("stats %+v", st)
	}
	p := int32(len(r.PromptTokenIDs))
	if want := []pipeline.VersionSpan{span(2, 2, p, p+int32(len(r.ResponseTokenIDs)))}; !slices.Equal(r.PolicyVersions, want) {
		t.Errorf("spans %v, want %v", r.PolicyVersions, want)
	}
}

// A client without an abort call: the request is cancelled client side
// and sent again after the resume.
func TestAbortWithoutServerCallCancels(t *testing.T) {
	c := &gated{started: make(chan struct{}, 4), release: make(chan struct{})}
	pol := generate.NewPolicy(0)
	g, err := generate.New(c, generate.Options{Model: "m", Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	r := rollout()
	done := make(chan error, 1)
	go func() { done <- g.Turn(context.Background(), r) }()
	<-c.started
	abortUpdate(t, pol, "the cancelled request", func() bool { return g.PolicyStats().Aborted == 1 }, 1)
	<-c.started
	close(c.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := []pipeline.VersionSpan{span(1, 1, 2, 5)}; !slices.Equal(r.PolicyVersions, want) || r.Status == pipeline.StatusError {
		t.Errorf("spans %v (status %s %s), want %v", r.PolicyVersions, r.Status, r.Error, want)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n != 2 {
		t.Errorf("%d requests, want 2", c.n)
	}
}

// abortUpdate pauses pol in abort mode, waits until cond says the turn in
// flight saw it (what names it), moves pol to version v and resumes.
func abortUpdate(t *testing.T, pol *generate.Policy, what string, cond func() bool, v int64) {
	t.Helper()
	if err := pol.Pause(generate.PauseAbort); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what, cond)
	if err := pol.SetVersion(v); err != nil {
		t.Fatal(err)
	}
	pol.Resume()
}
