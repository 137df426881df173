package generate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/inference/structured"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// A pause in abort mode loses no decoded token: rollouts cut
// mid-generation continue from their partial answers, so the simulator
// decodes exactly the completion tokens of the rows, and each row is the
// one a run without the pause gets. The client is the
// simulator alone and the simulator behind the structured-output check
// (inference.Decorate), as a run builds it: a decorator must keep its
// backend's abort call, or each request is cancelled client side and
// sent again from its start, its partial tokens decoded for nothing.
func TestAbortDecodesOnlyTheRowsTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(inference.Client) inference.Client
	}{
		{"bare", func(c inference.Client) inference.Client { return c }},
		{"decorated", func(c inference.Client) inference.Client { return structured.Wrap(c, structured.Config{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := slowSim()
			defer srv.Close()
			pol := generate.NewPolicy(1)
			g, err := generate.New(tc.wrap(srv), generate.Options{Model: "sim", API: "tokens", Policy: pol,
				Params: map[string]any{"max_tokens": 1500, "logprobs": 1}})
			if err != nil {
				t.Fatal(err)
			}
			const n = 4
			rows := make([]*pipeline.Rollout, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range rows {
				r := rollout()
				r.Task.Params = nil
				r.Seed = int64(42 + i)
				r.GroupID = fmt.Sprintf("t0-a%d", i)
				rows[i] = r
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = g.Turn(context.Background(), r)
				}()
			}
			// A running request has decoded a token by the end of its step.
			waitFor(t, "the requests running", func() bool { return srv.Stats().Running == n })
			abortUpdate(t, pol, "the aborted requests", func() bool { return g.PolicyStats().Aborted == n }, 2)
			wg.Wait()
			var rowTokens int64
			for i, r := range rows {
				if errs[i] != nil || r.Status == pipeline.StatusError {
					t.Fatalf("rollout %d: %v %s", i, errs[i], r.Error)
				}
				rowTokens += int64(r.CompletionTokens)
			}
			// Each row is the one a run without the pause gets: the
			// continuation is the rest of the answer begun.
			ref := sim.New(sim.Options{Seed: 7, Length: sim.LengthModel{Median: 400, Sigma: 0.01, Cap: 2000}})
			defer ref.Close()
			gref, err := generate.New(ref, generate.Options{Model: "sim", API: "tokens", Params: map[string]any{"max_tokens": 1500, "logprobs": 1}})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rows {
				want := rollout()
				want.Task.Params, want.Seed, want.GroupID = nil, r.Seed, r.GroupID
				if err := gref.Turn(context.Background(), want); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(r.ResponseTokenIDs, want.ResponseTokenIDs) || !slices.Equal(r.ResponseLogprobs, want.ResponseLogprobs) || r.FinishReason != want.FinishReason {
					t.Errorf("rollout %d: %d tokens (%s), without the pause %d (%s)", i, len(r.ResponseTokenIDs), r.FinishReason, len(want.ResponseTokenIDs), want.FinishReason)
				}
			}
			st := g.PolicyStats()
			if decoded := srv.Stats().DecodedTokens; decoded != rowTokens {
				t.Errorf("the simulator decoded %d tokens, the rows hold %d (%d lost); stats %+v", decoded, rowTokens, decoded-rowTokens, st)
			}
			if st.Continued != n || st.Discarded != 0 {
				t.Errorf("stats %+v: want %d continued, none discarded", st, n)
			}
		})
	}
}

// A turn whose response_format constrains the output is sent again from
// its start after a pause in abort mode, even token-in-token-out: its
// partial tokens are discarded (a constrained decoder and the
// structured-output check need the whole answer); other formats continue.
func TestAbortConstrainedRestartsTheTurn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		format    map[string]any
		continues bool
	}{
		{"json_object", map[string]any{"type": "json_object"}, false},
		{"json_schema", map[string]any{"type": "json_schema", "json_schema": map[string]any{"schema": map[string]any{"type": "object"}}}, false},
		{"text", map[string]any{"type": "text"}, true},
		{"none", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := slowSim()
			defer srv.Close()
			pol := generate.NewPolicy(1)
			params := map[string]any{"max_tokens": 1500}
			if tc.format != nil {
				params["response_format"] = tc.format
			}
			g, err := generate.New(srv, generate.Options{Model: "sim", API: "tokens", Policy: pol, Params: params})
			if err != nil {
				t.Fatal(err)
			}
			r := rollout()
			r.Task.Params = nil
			done := make(chan error, 1)
			go func() { done <- g.Turn(context.Background(), r) }()
			waitFor(t, "the request running", func() bool { return srv.Stats().Running == 1 })
			abortUpdate(t, pol, "the aborted request", func() bool { return g.PolicyStats().Aborted == 1 }, 2)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := g.PolicyStats()
			if continued := st.Continued == 1 && st.Discarded == 0; continued != tc.continues || !tc.continues && st.Discarded == 0 {
				t.Errorf("stats %+v, want continued %v", st, tc.continues)
			}
			if r.Status == pipeline.StatusError || srv.Stats().DecodedTokens != int64(r.CompletionTokens)+st.Discarded {
				t.Errorf("row %s (%s): %d tokens, %d discarded, the simulator decoded %d", r.Status, r.Error, r.CompletionTokens, st.Discarded, srv.Stats().DecodedTokens)
			}
		})
	}
}
