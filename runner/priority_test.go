package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/groups"
)

// TestRequestPriority runs against a vLLM-shaped server (the simulator
// over HTTP) and reads the priority field of every request as sent: under
// generate.priority: auto each group's requests share one priority, the
// groups admitted earlier (read earlier) the lower; under a target the
// groups admitted beyond the need come after every needed one; under off
// no request carries the field; with Continuous.Priority (serve's
// evaluation) every request carries that one.
func TestRequestPriority(t *testing.T) {
	minus1 := -1
	for _, tc := range []struct {
		name string
		sets []string
		// sent: whether requests carry a priority.
		sent bool
		// fixed: the priority every request carries (Continuous.Priority).
		fixed *int
	}{
		{"auto", nil, true, nil},
		{"auto, target", []string{"groups.keep=nonzero_std", "groups.target=3"}, true, nil},
		{"off", []string{"generate.priority=off"}, false, nil},
		{"fixed", nil, true, &minus1},
		{"fixed, off", []string{"generate.priority=off"}, false, &minus1},
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
			if _, err := run(t, cfg, runner.Options{Continuous: &runner.Continuous{Priority: tc.fixed}}); err != nil {
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
				if tc.fixed != nil {
					if r.priority != float64(*tc.fixed) {
						t.Fatalf("request for %q: priority %v, want %d for every request", r.prompt, r.priority, *tc.fixed)
					}
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
			if tc.sent && tc.fixed == nil && len(byPrio) < 3 {
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

// groupsSeen is an inference.Client that passes every call to a simulator
// and notes the groups (the request's affinity: its group id) it was
// asked for.
type groupsSeen struct {
	*sim.Server
	mu   sync.Mutex
	seen map[string]bool
}

func (g *groupsSeen) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	g.mu.Lock()
	g.seen[req.Affinity] = true
	g.mu.Unlock()
	return g.Server.Complete(ctx, req)
}

func (g *groupsSeen) groups() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.seen)
}

// TestContinuousCarriesGroupsOver runs a continuous run (the one serve
// drives: a supply's moving target) with groups.cancel_undecided and
// on_target: cancel at their defaults. The first demand, 2 groups, is met
// while more groups are in flight (the budget holds about need/rate plus
// a margin); at that step boundary nothing is cancelled: those groups run
// on and count toward the next demand, raised then. Every group asked for
// before the boundary ends committed (kept or filtered), none cancelled.
func TestContinuousCarriesGroupsOver(t *testing.T) {
	cfg := quickstart(t, "source.limit=16", "groups.keep=nonzero_std", "generate.sim.time_scale=0.3",
		"output.batch_rows=4", "output.file_rows=4", "output.filtered=true")
	client := &groupsSeen{Server: sim.New(sim.Options{Seed: 7, Preset: "short", Model: "sim-math", Accuracy: 0.6, TimeScale: 0.3}), seen: map[string]bool{}}
	t.Cleanup(client.Close)
	supply := groups.NewSupply(2)
	var (
		mu       sync.Mutex
		rows     int
		boundary map[string]bool // the groups asked for when the demand was met
	)
	met := make(chan struct{})
	opts := runner.Options{Client: client, Continuous: &runner.Continuous{Supply: supply, OnCommit: func(_ string, n int) {
		mu.Lock()
		defer mu.Unlock()
		rows += n
		if boundary == nil && rows >= 2*cfg.Repeat.N {
			boundary = client.groups()
			close(met)
		}
	}}}
	type result struct {
		sum *runner.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := run(t, cfg, opts)
		done <- result{sum, err}
	}()
	select {
	case <-met:
	case res := <-done:
		t.Fatalf("the run ended before the first demand was met: %v", res.err)
	}
	// The next step asks for everything the input holds: the run reads
	// it all and ends.
	supply.Raise(1000)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(boundary) <= 2 {
		t.Fatalf("%d groups asked for when the demand of 2 was met, want more in flight", len(boundary))
	}
	if res.sum.Cancelled != 0 {
		t.Errorf("%d rollouts cancelled, want none: groups in flight at a step boundary carry over", res.sum.Cancelled)
	}
	committed := map[string]bool{}
	for _, sub := range []string{schema.DataDir, schema.FilteredDir} {
		for _, r := range readBack(t, cfg.Output.Dir, sub) {
			committed[r.GroupID] = true
		}
	}
	for g := range boundary {
		if !committed[g] {
			t.Errorf("group %s, in flight at the step boundary, was not committed", g)
		}
	}
	t.Logf("%d groups asked for at the boundary, %d committed, %d dispatched", len(boundary), len(committed), res.sum.Dispatched)
}

// TestTaskOrderExactUnderPriority: groups.order: task commits exactly the
// first K passing groups in task order, with the request priorities on
// or off, against a simulator over HTTP whose batch (4) is far smaller
// than the requests in flight, so that its priority scheduler, not
// arrival, decides what runs. The reference is a run without a target.
func TestTaskOrderExactUnderPriority(t *testing.T) {
	const tasks, target = 40, 6
	s := sim.New(sim.Options{Seed: 7, Preset: "short", Model: "sim-math", Accuracy: 0.6, TimeScale: 0.05, Capacity: 4})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	base := []string{fmt.Sprintf("source.limit=%d", tasks), "generate.endpoints=[" + srv.URL + "/v1]", "groups.keep=nonzero_std"}
	kept := func(cfg *config.Config) []int64 {
		var out []int64
		for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
			if !slices.Contains(out, r.Task.Index) {
				out = append(out, r.Task.Index)
			}
		}
		slices.Sort(out)
		return out
	}
	ref := quickstart(t, base...)
	if _, err := run(t, ref, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	passing := kept(ref)
	if len(passing) < target+2 {
		t.Fatalf("the reference keeps %d groups, the test needs more than %d", len(passing), target+2)
	}
	want := passing[:target]
	for _, prio := range []string{"auto", "off"} {
		t.Run(prio, func(t *testing.T) {
			before := s.Stats()
			cfg := quickstart(t, append(base, fmt.Sprintf("groups.target=%d", target), "groups.order=task", "generate.priority="+prio)...)
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			if got := kept(cfg); !slices.Equal(got, want) {
				t.Fatalf("order: task kept the groups of tasks %v, want the first %d passing in task order %v", got, target, want)
			}
			t.Logf("priority %s: %d requests preempted", prio, s.Stats().Preempted-before.Preempted)
		})
	}
}
