package loop_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

// moe is the simulated MoE model of the routed-experts tests: more than
// 256 experts, so that vLLM's wire format is uint16.
var moe = sim.MoE{Layers: 3, Experts: 300, TopK: 2}

// TestRoutedExpertsAligned: multi-turn rows in tokens and sglang modes,
// with and without max_seq_len cuts, hold the experts of every position
// the engine routed, position by position as the simulator's router
// (recomputed here) sends them; the positions no request carried (the
// last answer's last token, the final observation) are marked not
// routed, and every observation a later prompt carried is routed.
func TestRoutedExpertsAligned(t *testing.T) {
	for _, api := range []inference.API{inference.APITokens, inference.APISGLang} {
		for _, msl := range []int{0, 600} {
			t.Run(fmt.Sprintf("%s/max_seq_len=%d", api, msl), func(t *testing.T) {
				out, seqs := runTokensMoE(t, api, msl, 200, moe, true)
				for _, r := range out {
					checkRoutes(t, r, seqs[r.Seed])
				}
			})
		}
	}
}

func checkRoutes(t *testing.T, r *pipeline.Rollout, reqs [][]int32) {
	t.Helper()
	if r.Status != pipeline.StatusOK {
		t.Fatalf("%s: %s %s", r, r.Status, r.Error)
	}
	rt := r.Routes
	if rt == nil {
		t.Fatalf("%s: no routes", r)
	}
	if rt.Layers != moe.Layers || rt.TopK != moe.TopK {
		t.Fatalf("%s: routes %d × %d, want %d × %d", r, rt.Layers, rt.TopK, moe.Layers, moe.TopK)
	}
	seq := r.Tokens()
	if rt.Positions() > len(seq) {
		t.Fatalf("%s: routes cover %d positions of %d", r, rt.Positions(), len(seq))
	}
	// The engine routed every position a request carried but the last
	// one of each request's prompt ++ answer; each request is a prefix
	// of the row (one segment), so the routed positions are those before
	// the last request's last token.
	routed := 0
	for _, q := range reqs {
		routed = max(routed, min(len(q), len(seq))-1)
	}
	if r.Truncated && len(reqs) > 0 && len(reqs[len(reqs)-1]) > len(seq) {
		routed = len(seq) // cut by max_seq_len: every kept position was routed
	}
	p0 := len(r.PromptTokenIDs)
	notRoutedObs := 0
	for p := range seq {
		got := rt.At(p)
		if p < routed {
			want := moe.Route(nil, 7, p, seq[p])
			if !slices.Equal(got, want) {
				t.Fatalf("%s: position %d (token %d): experts %v, the router's %v", r, p, seq[p], got, want)
			}
			continue
		}
		if rt.Routed(p) {
			t.Fatalf("%s: position %d of %d routed, past the %d a request carried", r, p, len(seq), routed)
		}
		if p >= p0 && r.LossMask[p-p0] == 0 {
			notRoutedObs++
		}
	}
	if r.Terminated && !r.Truncated && notRoutedObs == 0 {
		t.Errorf("%s: the final observation is routed", r)
	}
}

// TestRoutedExpertsNone: an engine that sends no routes (a dense model,
// or one not started for them) leaves Routes nil, as does not asking.
func TestRoutedExpertsNone(t *testing.T) {
	for _, tt := range []struct {
		name   string
		moe    sim.MoE
		routed bool
	}{{"dense engine", sim.MoE{}, true}, {"not asked", moe, false}} {
		for _, api := range []inference.API{inference.APITokens, inference.APISGLang} {
			t.Run(tt.name+"/"+string(api), func(t *testing.T) {
				out, _ := runTokensMoE(t, api, 0, 64, tt.moe, tt.routed)
				for _, r := range out {
					if r.Status != pipeline.StatusOK || r.Routes != nil {
						t.Fatalf("%s: %s, routes %+v", r, r.Status, r.Routes)
					}
				}
			})
		}
	}
}

// TestRoutedExpertsAcrossSegments: an agent whose third call rewrites its
// history sends the new segment's prompt alone; its answers' routes start
// at the segment's first token, each position's experts those the
// router gave it at its place in its own request; the first segment's
// last token (never run through the model) is not routed.
func TestRoutedExpertsAcrossSegments(t *testing.T) {
	for _, api := range []inference.API{inference.APITokens, inference.APISGLang} {
		t.Run(string(api), func(t *testing.T) {
			out, seqs := runAgentsMoE(t, api, 4, nil, moe, func(f *fakeSessions) envs.Env {
				return &scriptAgent{f: f, calls: 4, script: rewriting("What is 2 + 3?")}
			})
			for _, r := range out {
				if r.Status != pipeline.StatusOK || len(r.Segments) != 1 || r.Routes == nil {
					t.Fatalf("%s: %s %q, segments %+v, routes %v", r, r.Status, r.Error, r.Segments, r.Routes != nil)
				}
				row := r.Tokens()
				start := int(r.Segments[0].Token)
				reqs := seqs[r.Seed]
				if len(reqs) != 4 {
					t.Fatalf("%s: %d requests recorded", r, len(reqs))
				}
				// Each segment's requests are prefixes of its tokens: the
				// routed positions of a segment are those before its
				// longest request's last token, at their place in it.
				firstEnd := max(len(reqs[0]), len(reqs[1])) - 1
				secondEnd := start + max(len(reqs[2]), len(reqs[3])) - 1
				for p := range row {
					var want []int16
					switch {
					case p < firstEnd:
						want = moe.Route(nil, 7, p, row[p])
					case p >= start && p < secondEnd:
						want = moe.Route(nil, 7, p-start, row[p])
					}
					got := r.Routes.At(p)
					if want == nil {
						if r.Routes.Routed(p) {
							t.Fatalf("%s: position %d routed (segment at %d, first ends %d, second %d)", r, p, start, firstEnd, secondEnd)
						}
						continue
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s: position %d: %v, the router's %v (segment at %d)", r, p, got, want, start)
					}
				}
				if r.Routes.Routed(start - 1) {
					t.Errorf("%s: the first segment's last token is routed", r)
				}
			}
		})
	}
}
