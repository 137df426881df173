package runner_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestRequestPriority runs against a vLLM-shaped server (the simulator
// over HTTP) and reads the priority field of every request as sent: under
// generate.priority: auto each group's requests share one priority, the
// groups admitted earlier (read earlier) the lower; under a target the
// groups admitted beyond the need come after every needed one; under off
// no request carries the field.
func TestRequestPriority(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		// sent: whether requests carry a priority.
		sent bool
	}{
		{"auto", nil, true},
		{"auto, target", []string{"groups.keep=nonzero_std", "groups.target=3"}, true},
		{"off", []string{"generate.priority=off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sim.New(sim.Options{Seed: 7, Preset: "short", Model: "sim-math", Accuracy: 0.6})
			var mu sync.Mutex
			type sent struct {
				prompt   string
				priority any
				has      bool
			}
			var reqs []sent
			h := s.Handler()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions" {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					var b struct {
						Messages []struct{ Content string } `json:"messages"`
						Priority json.RawMessage            `json:"priority"`
					}
					if err := json.Unmarshal(body, &b); err != nil {
						t.Errorf("body: %v", err)
					}
					var p any
					_ = json.Unmarshal(b.Priority, &p)
					mu.Lock()
					reqs = append(reqs, sent{b.Messages[len(b.Messages)-1].Content, p, b.Priority != nil})
					mu.Unlock()
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(func() { srv.Close(); s.Close() })
			cfg := quickstart(t, append([]string{"source.limit=12", "generate.endpoints=[" + srv.URL + "/v1]"}, tc.sets...)...)
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reqs) == 0 {
				t.Fatal("no requests")
			}
			// prompts: each priority's prompts; order: the prompts in the
			// order their first request came.
			byPrio := map[float64]map[string]bool{}
			for _, r := range reqs {
				if r.has != tc.sent {
					t.Fatalf("request for %q carries a priority %v: %v, want %v", r.prompt, r.priority, r.has, tc.sent)
				}
				if !tc.sent {
					continue
				}
				p, ok := r.priority.(float64)
				if !ok || p < 0 {
					t.Fatalf("priority %v, want a non-negative integer", r.priority)
				}
				if byPrio[p] == nil {
					byPrio[p] = map[string]bool{}
				}
				byPrio[p][r.prompt] = true
			}
			for p, prompts := range byPrio {
				if len(prompts) != 1 {
					t.Errorf("priority %v is shared by the groups of %d prompts, want one group", p, len(prompts))
				}
			}
			if tc.sent && len(byPrio) < 3 {
				t.Errorf("%d distinct priorities over %d requests, want one per group", len(byPrio), len(reqs))
			}
		})
	}
}

// TestCancelUndecided runs dynamic sampling on a timed simulator with
// groups.cancel_undecided on and off: either way exactly K groups are
// committed, every one kept with rewards that differ, and every rollout
// dispatched resolves once; with it on, groups are cancelled before the
// target (their rollouts counted as cancelled).
func TestCancelUndecided(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			cfg := quickstart(t, "repeat.n=8", "groups.keep=nonzero_std", "groups.target=12", "generate.sim.keep=0.5",
				"generate.sim.time_scale=0.5", "groups.cancel_undecided="+fmt.Sprint(on), "output.filtered=true")
			sum, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			byTask := map[int64][]float64{}
			for _, r := range rows {
				byTask[r.Task.Index] = append(byTask[r.Task.Index], r.Reward)
				if !r.Kept || r.GroupRewardStd == 0 {
					t.Fatalf("%s: kept %v std %g", r, r.Kept, r.GroupRewardStd)
				}
			}
			if len(byTask) != 12 || len(rows) != 12*8 || sum.Kept != 12 {
				t.Fatalf("%d groups, %d rows, summary kept %d", len(byTask), len(rows), sum.Kept)
			}
			for task, rw := range byTask {
				if slices.Min(rw) == slices.Max(rw) {
					t.Fatalf("task %d: all rewards equal", task)
				}
			}
			if sum.OK+sum.Errors+sum.Cancelled+sum.Filtered != sum.Dispatched {
				t.Fatalf("accounting: ok %d errors %d cancelled %d filtered %d, dispatched %d", sum.OK, sum.Errors, sum.Cancelled, sum.Filtered, sum.Dispatched)
			}
			t.Logf("cancel_undecided %v: dispatched %d, cancelled %d", on, sum.Dispatched, sum.Cancelled)
		})
	}
}
