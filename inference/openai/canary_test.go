package openai

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// When a canary round is due: a holds one request since t0; b answered
// at t0+10ms (and is idle, or holds requests). Fake clock.
func TestCanaryRoundDue(t *testing.T) {
	for _, tc := range []struct {
		name string
		// held is how long a has held its request at the check; typical
		// the fleet's typical answer time.
		held, typical time.Duration
		bBusy         bool          // b holds requests and last answered at t0+10ms
		out           bool          // a round for a is out already
		answeredAt    time.Duration // a's last round, answered, was when a had held this long (0: none)
		want          bool
	}{
		{name: "under the suspect floor", held: 90 * time.Millisecond, want: false},
		{name: "past the suspect floor", held: 110 * time.Millisecond, want: true},
		{name: "under 4× the typical answer", held: 300 * time.Millisecond, typical: 100 * time.Millisecond, want: false},
		{name: "past 4× the typical answer", held: 410 * time.Millisecond, typical: 100 * time.Millisecond, want: true},
		{name: "a round already out", held: time.Second, out: true, want: false},
		{name: "last canary answered, not yet twice as long", held: 190 * time.Millisecond, answeredAt: 100 * time.Millisecond, want: false},
		{name: "last canary answered, twice as long", held: 210 * time.Millisecond, answeredAt: 100 * time.Millisecond, want: true},
		{name: "the other busy and answering within the silence time", held: 5 * time.Second, bBusy: true, want: true},
		{name: "the other busy, no answer within the silence time", held: 40 * time.Second, bBusy: true, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			now := t0
			a, b := &endpoint{idx: 0, name: "a"}, &endpoint{idx: 1, name: "b"}
			f := newFleet([]*endpoint{a, b}, 0, 8, 3, func() time.Time { return now }, nil)
			f.sil.floor = 30 * time.Second
			f.mu.Lock()
			a.inflight, a.busySince = 1, t0
			f.answered(b, time.Millisecond, t0.Add(10*time.Millisecond))
			f.sil.typical = tc.typical
			if tc.bBusy {
				b.inflight = 2
			}
			a.canaryOut = tc.out
			if tc.answeredAt > 0 {
				a.canaryFor, a.canaryHeld = t0, tc.answeredAt
			}
			f.mu.Unlock()
			now = t0.Add(tc.held)
			rounds := f.checkSilence()
			if got := len(rounds) == 1; got != tc.want {
				t.Fatalf("rounds %+v, want a round: %v", rounds, tc.want)
			}
			if tc.want && (rounds[0].suspect != a || rounds[0].peer != b || !a.canaryOut) {
				t.Fatalf("round %+v: want a the suspect, b its control, a's round out", rounds[0])
			}
		})
	}
}

// A canary verdict takes the suspect out only while its round holds: it
// has not answered since the round began, and it still holds requests.
// An answered canary leaves it in.
func TestCanaryVerdict(t *testing.T) {
	for _, tc := range []struct {
		name     string
		silent   bool
		answered bool // a answered a request after the round began
		want     bool // taken out
	}{
		{name: "canary unanswered", silent: true, want: true},
		{name: "canary answered", silent: false, want: false},
		{name: "unanswered, but a request answered since", silent: true, answered: true, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			now := t0
			var log logTo
			a, b := &endpoint{idx: 0, name: "a"}, &endpoint{idx: 1, name: "b"}
			f := newFleet([]*endpoint{a, b}, 0, 8, 3, func() time.Time { return now }, log.logf)
			f.sil.floor = 30 * time.Second
			moved := 0
			f.mu.Lock()
			a.inflight, a.busySince = 2, t0
			a.attempts = map[uint64]context.CancelCauseFunc{1: func(error) { moved++ }, 2: func(error) { moved++ }}
			f.answered(b, time.Millisecond, t0.Add(10*time.Millisecond))
			f.mu.Unlock()
			now = t0.Add(200 * time.Millisecond)
			rounds := f.checkSilence()
			if len(rounds) != 1 {
				t.Fatalf("%d rounds, want 1", len(rounds))
			}
			if tc.answered {
				f.mu.Lock()
				f.answered(a, time.Second, now)
				f.mu.Unlock()
			}
			now = now.Add(300 * time.Millisecond)
			f.canaryVerdict(rounds[0], tc.silent, "a canary had no answer", time.Second)
			if out := !a.healthy; out != tc.want {
				t.Fatalf("taken out %v, want %v; log:\n%s", out, tc.want, log.String())
			}
			if a.canaryOut {
				t.Fatal("the round is still marked out after its verdict")
			}
			if tc.want {
				if moved != 2 || a.moved != 2 || !a.silent || !a.probeAfter.Equal(now.Add(time.Second)) {
					t.Fatalf("moved %d (counted %d), silent %v, probe after %s: want 2 moved, silent, probe in 1s", moved, a.moved, a.silent, a.probeAfter.Sub(now))
				}
				if !strings.Contains(log.String(), "endpoint a taken out (silent: no answer for 500ms with 2 requests in flight, and a canary had no answer") {
					t.Fatalf("log:\n%s", log.String())
				}
			}
		})
	}
}

// The canary goes where generate.api's requests go, as that protocol's
// body, with one token of answer.
func TestCanaryPerProtocol(t *testing.T) {
	for _, tc := range []struct {
		api  inference.API
		path string
		want string // a field of the body
	}{
		{inference.APIChat, "/v1/chat/completions", `"messages"`},
		{inference.APICompletions, "/v1/completions", `"prompt":"`},
		{inference.APITokens, "/v1/completions", `"prompt":[0]`},
		{inference.APISGLang, "/generate", `"input_ids":[0]`},
		{inference.APIBatch, "/v1/chat/completions", `"messages"`},
	} {
		t.Run(string(tc.api), func(t *testing.T) {
			var mu sync.Mutex
			var path, body, header string
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				path, body, header = r.URL.Path, string(b), r.Header.Get(CanaryHeader)
				mu.Unlock()
				io.WriteString(w, okBody)
			}))
			defer s.Close()
			cfg := testConfig(s.URL + "/v1")
			cfg.API = tc.api
			c := newClient(t, cfg, HTTPOptions{})
			if ok, _ := c.canary(context.Background(), c.fleet.eps[0]); !ok {
				t.Fatal("the canary had no answer")
			}
			mu.Lock()
			defer mu.Unlock()
			if path != tc.path || !strings.Contains(body, tc.want) || !isCanary([]byte(body)) || header != "1" {
				t.Fatalf("canary to %s (%s: %q): %s, want %s with %s and one token, the header set", path, CanaryHeader, header, body, tc.path, tc.want)
			}
			if st := c.Stats()[0]; st.Canaries != 1 || st.Requests != 0 {
				t.Fatalf("stats %+v: want 1 canary, 0 requests", st)
			}
		})
	}
}

// A silent endpoint is probed with a canary, not GET /models (which a hung
// engine still answers): it stays out while it holds canaries, and is
// back in once one answers.
func TestSilentProbedByCanary(t *testing.T) {
	ok := newServer(t, nil)
	var mu sync.Mutex
	release := make(chan struct{})
	answering := false
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"data":[{"id":"test-model"}]}`)
			return
		}
		mu.Lock()
		a := answering
		mu.Unlock()
		if !a {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, okBody)
	}))
	defer hung.Close()
	defer close(release)
	cfg := testConfig(ok.URL+"/v1", hung.URL+"/v1")
	cfg.Timeout = pipeline.Duration(time.Minute)
	var log logTo
	c := newClient(t, cfg, HTTPOptions{Logf: log.logf, ProbeInterval: 20 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Complete(context.Background(), userReq("q")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if c.Stats()[1].Healthy {
		t.Fatal("the hung endpoint is in")
	}
	// Probes (GET /models answers) do not bring it back while its
	// canaries are held.
	base := c.Stats()[1].Canaries
	waitFor(t, "two canary probes", func() bool { return c.Stats()[1].Canaries >= base+2 })
	if c.Stats()[1].Healthy {
		t.Fatalf("a hung endpoint back in by a probe:\n%s", log.String())
	}
	mu.Lock()
	answering = true
	mu.Unlock()
	waitFor(t, "the endpoint back in", func() bool { return c.Stats()[1].Healthy })
	if !strings.Contains(log.String(), "back in (a canary request answered)") {
		t.Fatalf("log:\n%s", log.String())
	}
}
