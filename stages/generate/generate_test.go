package generate_test

import (
	"context"
	"errors"
	"github.com/trajflow/trajflow/inference"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

func newGen(c inference.Client, params map[string]any) *generate.Generator {
	g, err := generate.New(c, generate.Options{Model: "m", Params: params})
	if err != nil {
		panic(err)
	}
	return g
}

// scripted answers each call with the next response (or error) of a script
// and records the requests.
type scripted struct {
	resps []*inference.Response
	errs  []error
	reqs  []*inference.Request
}

func (s *scripted) Complete(_ context.Context, req *inference.Request) (*inference.Response, error) {
	i := len(s.reqs)
	s.reqs = append(s.reqs, req)
	if i < len(s.errs) && s.errs[i] != nil {
		return nil, s.errs[i]
	}
	return s.resps[i], nil
}

func resp(prompt []int32, gen []int32) *inference.Response {
	lp := make([]float32, len(gen))
	for i := range lp {
		lp[i] = -0.5
	}
	return &inference.Response{PromptTokenIDs: prompt, Message: pipeline.Message{Content: "x", TokenIDs: gen, Logprobs: lp}, FinishReason: "stop", CompletionTokens: len(gen)}
}

func rollout() *pipeline.Rollout {
	t := &pipeline.Task{Params: map[string]any{"temperature": 0.3, "max_tokens": 10}}
	return &pipeline.Rollout{Task: t, Seed: 42, GroupID: "t0-a0", Messages: []pipeline.Message{{Role: "user", Content: "q"}}}
}

func TestTokenViewAcrossTurns(t *testing.T) {
	tests := []struct {
		name      string
		second    []int32 // the second turn's prompt ids
		breaks    int
		response  []int32
		mask      []int8
		envTokens int
	}{
		{"continuous", []int32{1, 2, 10, 11, 7, 8}, 0, []int32{10, 11, 7, 8, 20}, []int8{1, 1, 0, 0, 1}, 2},
		// The server re-rendered the first answer: the row restarts with
		// exactly this request's prompt, and only the new ids are mask 1.
		{"break", []int32{1, 2, 99, 7, 8}, 1, []int32{99, 7, 8, 20}, []int8{0, 0, 0, 1}, 3},
		{"server without ids", nil, 0, []int32{10, 11, 20}, []int8{1, 1, 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := []int32{1, 2}
			if tt.second == nil {
				first = nil
			}
			c := &scripted{resps: []*inference.Response{resp(first, []int32{10, 11}), resp(tt.second, []int32{20})}}
			g := newGen(c, map[string]any{"temperature": 1.0})
			r := rollout()
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			r.Messages = append(r.Messages, pipeline.Message{Role: "user", Content: "obs", Turn: 1})
			if err := g.Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if r.TokenContinuityBreaks != tt.breaks || !slices.Equal(r.ResponseTokenIDs, tt.response) || !slices.Equal(r.LossMask, tt.mask) || r.EnvTokens != tt.envTokens {
				t.Fatalf("breaks %d response %v mask %v env %d", r.TokenContinuityBreaks, r.ResponseTokenIDs, r.LossMask, r.EnvTokens)
			}
			if len(r.ResponseLogprobs) != len(r.ResponseTokenIDs) || r.NumTurns != 2 || r.Messages[3].Turn != 2 || r.Messages[3].Role != "assistant" {
				t.Fatalf("logprobs %v turns %d messages %+v", r.ResponseLogprobs, r.NumTurns, r.Messages)
			}
		})
	}
}

func TestRequestParams(t *testing.T) {
	c := &scripted{resps: []*inference.Response{resp(nil, nil)}}
	r := rollout()
	r.StopStrings = []string{"</answer>"}
	if err := newGen(c, map[string]any{"temperature": 1.0}).Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	p := c.reqs[0].Params
	if p["temperature"] != 1.0 || p["max_tokens"] != 10 || p["seed"] != int64(42) || !slices.Equal(p["stop"].([]string), []string{"</answer>"}) {
		t.Fatalf("params %v", p)
	}
	if c.reqs[0].Affinity != "t0-a0" || c.reqs[0].Model != "m" {
		t.Fatalf("request %+v", c.reqs[0])
	}
	if r.Task.Params["temperature"] != 0.3 {
		t.Fatal("the row's own params must not change")
	}
}

// TestRequestSeed checks that the rollout's seed is sent unless it has none
// to send (NoSeed), when a seed in the row's or the config's params goes as is.
func TestRequestSeed(t *testing.T) {
	tests := []struct {
		name     string
		noSeed   bool
		row, cfg map[string]any
		want     any // nil: no seed key
	}{
		{"sent", false, nil, nil, int64(42)},
		{"not sent", true, nil, nil, nil},
		{"row's own when none sent", true, map[string]any{"seed": 5}, nil, 5},
		{"config's own when none sent", true, nil, map[string]any{"seed": 9}, 9},
		{"rollout's wins", false, map[string]any{"seed": 5}, map[string]any{"seed": 9}, int64(42)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &scripted{resps: []*inference.Response{resp(nil, nil)}}
			r := rollout()
			r.NoSeed = tt.noSeed
			r.Task.Params = tt.row
			if err := newGen(c, tt.cfg).Turn(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			got, ok := c.reqs[0].Params["seed"]
			if tt.want == nil {
				if ok {
					t.Errorf("seed %v sent", got)
				}
			} else if got != tt.want {
				t.Errorf("seed %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		err       error
		turns     int // turns the rollout had before
		status    pipeline.Status
		class     string
		truncated bool
	}{
		// The first prompt refused: an error row, nothing generated.
		{&inference.Error{Class: inference.ClassContextLength, Status: 400, Msg: "too long"}, 0, pipeline.StatusError, inference.ClassContextLength, false},
		// A later turn refused: the turns so far are kept, truncated,
		// and the refusal is recorded.
		{&inference.Error{Class: inference.ClassContextLength, Status: 400, Msg: "too long"}, 2, pipeline.StatusOK, "", true},
		{&inference.Error{Class: inference.ClassServer, Status: 503, Msg: "down"}, 0, pipeline.StatusError, inference.ClassServer, false},
		{errors.New("odd"), 0, pipeline.StatusError, "internal", false},
	}
	for _, tt := range tests {
		c := &scripted{errs: []error{tt.err}}
		r := rollout()
		r.NumTurns = tt.turns
		if err := newGen(c, nil).Turn(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if r.Status != tt.status || r.ErrorClass != tt.class || r.Truncated != tt.truncated {
			t.Fatalf("%v: status %s class %q truncated %v", tt.err, r.Status, r.ErrorClass, r.Truncated)
		}
		if tt.err != nil && inference.ErrorClass(tt.err) == inference.ClassContextLength && !strings.Contains(r.Error, "too long") {
			t.Fatalf("the refusal is not recorded: error %q", r.Error)
		}
		if tt.truncated && r.FinishReason != generate.FinishContextLength {
			t.Fatalf("finish reason %q", r.FinishReason)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &scripted{errs: []error{context.Canceled}}
	if err := newGen(c, nil).Turn(ctx, rollout()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled turn returns the context's error, got %v", err)
	}
}

// The first turn's token view shares the response's arrays; later turns
// must copy rather than write into them, and missing logprobs read as 0.
func TestTokenViewLeavesResponsesAlone(t *testing.T) {
	r1 := resp([]int32{1, 2}, append(make([]int32, 0, 16), 10, 11)) // room to append in place
	r1.Message.Logprobs = nil
	r2 := resp([]int32{1, 2, 10, 11, 7}, []int32{20})
	g := newGen(&scripted{resps: []*inference.Response{r1, r2}}, nil)
	r := rollout()
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.LossMask, []int8{1, 1}) || !slices.Equal(r.ResponseLogprobs, []float32{0, 0}) {
		t.Fatalf("after one turn: mask %v logprobs %v", r.LossMask, r.ResponseLogprobs)
	}
	r.Messages = append(r.Messages, pipeline.Message{Role: "user", Content: "obs", Turn: 1})
	if err := g.Turn(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.ResponseTokenIDs, []int32{10, 11, 7, 20}) || !slices.Equal(r.LossMask, []int8{1, 1, 0, 1}) ||
		!slices.Equal(r.ResponseLogprobs, []float32{0, 0, 0, -0.5}) {
		t.Fatalf("after two turns: ids %v mask %v logprobs %v", r.ResponseTokenIDs, r.LossMask, r.ResponseLogprobs)
	}
	if got := r1.Message.TokenIDs[:cap(r1.Message.TokenIDs)][2]; got != 0 {
		t.Fatalf("the first response's array was written past its length: %d", got)
	}
	if !slices.Equal(r.Messages[1].TokenIDs, []int32{10, 11}) {
		t.Fatalf("first assistant message ids %v", r.Messages[1].TokenIDs)
	}
}

// BenchmarkTurn is one single-turn generation against an instant client:
// the generate stage's own cost around Complete.
func BenchmarkTurn(b *testing.B) {
	gen := make([]int32, 60)
	res := resp([]int32{1, 2, 3}, gen)
	c := instant{res}
	g := newGen(c, map[string]any{"temperature": 1.0, "return_token_ids": true})
	b.ReportAllocs()
	for b.Loop() {
		r := rollout()
		if err := g.Turn(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

type instant struct{ resp *inference.Response }

func (c instant) Complete(context.Context, *inference.Request) (*inference.Response, error) {
	return c.resp, nil
}
