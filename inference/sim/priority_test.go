package sim

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestModelPriorityPreemption fills a batch of 2 and sends requests of
// several priorities: the waiting queue is served by (priority, arrival),
// a waiting request of higher priority (lower value) preempts the running
// one of the largest (priority, arrival) at the next step boundary, and
// the preempted request recomputes its prompt and generated tokens when it
// comes back.
func TestModelPriorityPreemption(t *testing.T) {
	const a, c, p = 0.010, 0.001, 0.0001
	type req struct {
		name     string
		at       float64
		priority int
		tokens   int
	}
	for _, tc := range []struct {
		name string
		reqs []req
		// preempted: the requests preempted, in order; finish: the order
		// they finish in.
		preempted []string
		finish    []string
	}{
		{
			name: "fifo at equal priority: nothing preempted",
			reqs: []req{{"a", 0, 0, 10}, {"b", 0, 0, 10}, {"c", 0.001, 0, 2}},
			// c waits for a slot although it is short.
			finish: []string{"a", "b", "c"},
		},
		{
			name: "a higher priority preempts the latest of the lowest",
			reqs: []req{{"low1", 0, 5, 10}, {"low2", 0, 5, 10}, {"high", 0.001, 1, 2}},
			// low2 arrived after low1 at the same priority: it is preempted.
			preempted: []string{"low2"},
			finish:    []string{"high", "low1", "low2"},
		},
		{
			name: "the lowest priority goes first, whatever its arrival",
			reqs: []req{{"mid", 0, 3, 10}, {"low", 0, 7, 10}, {"high", 0.001, 1, 2}, {"high2", 0.002, 2, 2}},
			// high preempts low; high2 beats mid's 3 but low (7), waiting,
			// comes after it: high2 preempts mid.
			preempted: []string{"low", "mid"},
			finish:    []string{"high", "high2", "mid", "low"},
		},
		{
			name:   "a lower priority waits even behind later arrivals",
			reqs:   []req{{"x", 0, 0, 10}, {"y", 0, 0, 10}, {"late-low", 0.001, 9, 1}, {"later-high", 0.002, 0, 1}},
			finish: []string{"x", "y", "later-high", "late-low"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel(a, c, p, 2)
			jobs := map[*job]string{}
			var order []*job
			var done []string
			for _, r := range tc.reqs {
				done = append(done, collect(m.advance(r.at), jobs)...)
				j := newJob(100, r.tokens)
				j.priority = r.priority
				jobs[j] = r.name
				order = append(order, j)
				m.arrive(r.at, j)
			}
			for {
				tn, ok := m.next()
				if !ok {
					break
				}
				done = append(done, collect(m.advance(tn), jobs)...)
			}
			if !slices.Equal(done, tc.finish) {
				t.Errorf("finished %v, want %v", done, tc.finish)
			}
			var preempted []string
			var recompute int64
			for _, j := range order {
				if j.preemptions > 0 {
					preempted = append(preempted, jobs[j])
					// It ran one step before the preemption: prompt + 1.
					recompute += int64(j.prompt + 1)
				}
			}
			slices.SortFunc(preempted, func(x, y string) int { return slices.Index(tc.preempted, x) - slices.Index(tc.preempted, y) })
			if !slices.Equal(preempted, tc.preempted) || m.preempted != int64(len(tc.preempted)) {
				t.Errorf("preempted %v (counter %d), want %v", preempted, m.preempted, tc.preempted)
			}
			if m.recomputed != recompute {
				t.Errorf("recomputed %d tokens, want %d", m.recomputed, recompute)
			}
			var tokens int64
			for _, j := range order {
				tokens += int64(j.tokens)
			}
			if m.decoded != tokens {
				t.Errorf("decoded %d tokens, want %d: a preempted request does not decode twice", m.decoded, tokens)
			}
		})
	}
}

func collect(out []*job, names map[*job]string) []string {
	var s []string
	for _, j := range out {
		s = append(s, names[j])
	}
	return s
}

// TestHTTPPriorityPreemption sends, over HTTP to a server whose batch
// holds one request, a long request of low priority (a larger value) and,
// once it runs, a short one of higher priority: the short one preempts it
// at the next step boundary and is answered while the long one waits,
// on /v1/chat/completions and /v1/completions alike. The long one is
// then given up (it would run for minutes): the server counted one
// preemption and the tokens the long one would recompute.
func TestHTTPPriorityPreemption(t *testing.T) {
	for _, tc := range []struct {
		name, path, low, high string
	}{
		{"chat", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a long one"}],"seed":1,"priority":9}`,
			`{"messages":[{"role":"user","content":"a short one"}],"seed":2,"max_tokens":3,"priority":1}`},
		{"completions", "/v1/completions",
			`{"prompt":"a long one","seed":1,"priority":9}`,
			`{"prompt":"a short one","seed":2,"max_tokens":3,"priority":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, base := startHTTP(t, Options{Seed: 1, TimeScale: 1, Capacity: 1, A: 100 * time.Microsecond, C: time.Microsecond,
				Length: LengthModel{Median: 2e5, Cap: 1 << 20}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			lowDone := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, "POST", base+tc.path, strings.NewReader(tc.low))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				lowDone <- err
			}()
			waitFor(t, func() bool { return s.Stats().Running == 1 })

			resp, data, err := post(t, base+tc.path, tc.high)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("high priority: %v %s", err, data)
			}
			select {
			case err := <-lowDone:
				t.Fatalf("the low-priority request ended (%v) before the high one was answered", err)
			default:
			}
			st := s.Stats()
			if st.Requests != 1 || st.Preempted != 1 || st.RecomputedTokens == 0 {
				t.Fatalf("after the high-priority reply: %d completed, %d preempted, %d tokens to recompute; want 1, 1, > 0",
					st.Requests, st.Preempted, st.RecomputedTokens)
			}
			cancel()
			<-lowDone
			waitFor(t, func() bool { st := s.Stats(); return st.Running == 0 && st.Cancelled == 1 })
		})
	}
}
