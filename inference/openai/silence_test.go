package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// hungServer answers GET /models (as a hung engine does: its API server
// still lists its models) and holds every other request, unanswered,
// until the test ends.
func hungServer(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"data":[{"id":"test-model"}]}`)
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s.URL + "/v1"
}

// isCanary reports whether a request body is the silence watch's canary
// (one token of answer: max_tokens 1, or SGLang's max_new_tokens 1).
func isCanary(body []byte) bool {
	var b struct {
		MaxTokens      *int `json:"max_tokens"`
		SamplingParams struct {
			MaxNewTokens *int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	_ = json.Unmarshal(body, &b)
	one := func(p *int) bool { return p != nil && *p == 1 }
	return one(b.MaxTokens) || one(b.SamplingParams.MaxNewTokens)
}

// logTo is a Logf that writes to a builder, safe for concurrent use.
type logTo struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logTo) logf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, f+"\n", a...)
}

func (l *logTo) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// One endpoint of two answers GET /models and holds every completion,
// with the watch's defaults (no SilenceAfter): its canary goes unanswered
// while the other answers the same, so it is taken out as silent (logged,
// by name, with the canary), its requests move to the other, and every
// request succeeds long before the 30 s floor could have taken it out.
func TestSilentEndpointMoved(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, okBody)
	}))
	defer ok.Close()
	hung := hungServer(t)
	cfg := testConfig(ok.URL+"/v1", hung)
	cfg.Concurrency = 16
	cfg.Timeout = pipeline.Duration(time.Minute)
	var log logTo
	c := newClient(t, cfg, HTTPOptions{Logf: log.logf})
	start := time.Now()
	sendAll(t, c, 100)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("100 requests took %s with one endpoint silent (the floor is 30 s: the canary did not decide)", took)
	}
	st := c.Stats()
	if st[1].Healthy || st[1].Moved == 0 || !st[0].Healthy {
		t.Fatalf("stats %+v: want the silent endpoint out with its requests moved", st)
	}
	if st[1].Canaries == 0 || st[0].Canaries == 0 {
		t.Fatalf("stats %+v: want a canary counted on the suspect and on its control", st)
	}
	if !strings.Contains(log.String(), "endpoint "+hung+" taken out (silent: no answer for") ||
		!strings.Contains(log.String(), "a 1-token canary request had no answer within") {
		t.Fatalf("the log does not name the silent endpoint and its canary:\n%s", log.String())
	}
}

// At the run's tail, with defaults: the healthy endpoint has answered its
// share and holds nothing, the hung one holds the last requests; its
// canary goes unanswered while the idle one answers its own, so the
// requests move and all succeed (before the canary, the 30 s floor).
func TestSilentAtTheTailWithDefaults(t *testing.T) {
	ok := newServer(t, nil)
	hung := hungServer(t)
	cfg := testConfig(ok.URL+"/v1", hung)
	cfg.Timeout = pipeline.Duration(time.Minute)
	var log logTo
	c := newClient(t, cfg, HTTPOptions{Logf: log.logf})
	sendAll(t, c, 8)
	st := c.Stats()
	if st[1].Healthy || st[1].Moved == 0 {
		t.Fatalf("stats %+v: want the hung endpoint holding the tail out, its requests moved", st)
	}
	if !strings.Contains(log.String(), "canary") {
		t.Fatalf("the log does not say the canary decided:\n%s", log.String())
	}
}

// An endpoint busy with answers longer than any seen (the other answers
// in a few ms) but that answers a short request at once is alive: its
// canaries answer, it is not taken out, and its requests are not moved
// (each reaches it once). Canaries are counted apart from its requests.
func TestSilenceCanaryAnsweredKeepsALongAnswer(t *testing.T) {
	fast := newServer(t, nil)
	var long atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		data, _ := io.ReadAll(r.Body)
		if !isCanary(data) {
			long.Add(1)
			select { // a long answer: 1.5 s
			case <-time.After(1500 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, okBody)
	}))
	defer slow.Close()
	cfg := testConfig(fast.URL+"/v1", slow.URL+"/v1")
	cfg.Timeout = pipeline.Duration(time.Minute)
	var log logTo
	c := newClient(t, cfg, HTTPOptions{Logf: log.logf})
	sendAll(t, c, 4)
	st := c.Stats()
	if !st[1].Healthy || st[1].Moved != 0 || st[1].Canaries == 0 {
		t.Fatalf("stats %+v: want the busy endpoint in, nothing moved, its canaries counted\n%s", st, log.String())
	}
	if got := long.Load(); got != st[1].Requests || st[1].Requests == 0 {
		t.Fatalf("the busy endpoint saw %d long requests, its Requests count %d: canaries must not count as requests, and no request sent twice", got, st[1].Requests)
	}
}

// When no endpoint answers (engines still loading), none is taken out:
// silence is judged against endpoints that answer.
func TestSilenceNeedsAnAnsweringFleet(t *testing.T) {
	a, b := hungServer(t), hungServer(t)
	cfg := testConfig(a, b)
	cfg.Timeout = pipeline.Duration(time.Minute)
	c := newClient(t, cfg, HTTPOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Complete(ctx, userReq("q"))
		}()
	}
	wg.Wait()
	for _, s := range c.Stats() {
		if !s.Healthy || s.Moved != 0 || s.Canaries != 0 {
			t.Fatalf("stats %+v: an endpoint taken out, or sent a canary, while none answered", c.Stats())
		}
	}
}

// An endpoint busy with answers longer than the silence floor is not
// silent while they take no longer than the longest answers seen: the
// time allowed grows to twice the longest answer.
func TestSilenceAllowsTheLongestAnswers(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := &endpoint{idx: 0, name: "a"}, &endpoint{idx: 1, name: "b"}
	f := newFleet([]*endpoint{a, b}, 0, 8, 3, func() time.Time { return now }, nil)
	f.sil.floor = time.Second
	// b answered once after 5 s: the longest answer.
	f.mu.Lock()
	f.answered(b, 5*time.Second, now)
	a.inflight, a.busySince = 2, now
	f.mu.Unlock()
	now = now.Add(8 * time.Second) // under 2 × 5 s
	f.mu.Lock()
	f.answered(b, time.Millisecond, now) // b answers on
	f.mu.Unlock()
	f.checkSilence()
	if !a.healthy {
		t.Fatal("an endpoint holding requests for 8 s taken out while answers take 5 s")
	}
	now = now.Add(3 * time.Second) // 11 s: past 2 × 5 s
	f.mu.Lock()
	f.answered(b, time.Millisecond, now) // b answers on
	f.mu.Unlock()
	f.checkSilence()
	if a.healthy {
		t.Fatal("an endpoint silent for twice the longest answer still in")
	}
}

// The default floor is what protects a long answer the fleet has not yet
// seen the like of (early in a run, the longest answer seen is short) on
// an endpoint whose canaries answer (no canary verdict here: the rounds
// checkSilence returns are not sent): an endpoint holding one request for
// 25 s, while the other answers every 100 ms, stays in under the default
// silence_after (30 s); past it, the same endpoint is taken out, as a
// hung one is. BENCHMARKS.md ("A hung endpoint in a short run") has why
// the default stays 30 s.
func TestSilenceDefaultFloorAllowsAFirstLongAnswer(t *testing.T) {
	var o HTTPOptions
	o.setDefaults()
	if o.SilenceAfter != 30*time.Second {
		t.Fatalf("default SilenceAfter %s, want 30s", o.SilenceAfter)
	}
	now := time.Unix(1000, 0)
	a, b := &endpoint{idx: 0, name: "a"}, &endpoint{idx: 1, name: "b"}
	f := newFleet([]*endpoint{a, b}, 0, 8, 3, func() time.Time { return now }, nil)
	f.sil.floor = o.SilenceAfter
	f.mu.Lock()
	a.inflight, a.busySince = 1, now // one long answer in flight, nothing else
	f.mu.Unlock()
	// b answers a short request every 100 ms for 25 s.
	for range 250 {
		now = now.Add(100 * time.Millisecond)
		f.mu.Lock()
		f.answered(b, 100*time.Millisecond, now)
		f.mu.Unlock()
		f.checkSilence()
	}
	if !a.healthy {
		t.Fatalf("an endpoint with one answer of 25 s in flight taken out (silentAfter %s)", f.silentAfter())
	}
	// Past the floor, held without an answer: taken out.
	for range 60 {
		now = now.Add(100 * time.Millisecond)
		f.mu.Lock()
		f.answered(b, 100*time.Millisecond, now)
		f.mu.Unlock()
		f.checkSilence()
	}
	if a.healthy {
		t.Fatal("an endpoint silent for 31 s, past the default floor, still in")
	}
}

// silenceFleet is a fleet of a and b on a fake clock, the silence floor
// at its default (30 s); b answered once after answer, then went idle.
func silenceFleet(t *testing.T, answer time.Duration) (f *fleet, a, b *endpoint, now *time.Time) {
	t.Helper()
	var o HTTPOptions
	o.setDefaults()
	clock := time.Unix(1000, 0)
	a, b = &endpoint{idx: 0, name: "a"}, &endpoint{idx: 1, name: "b"}
	f = newFleet([]*endpoint{a, b}, 0, 8, 3, func() time.Time { return clock }, nil)
	f.sil.floor = o.SilenceAfter
	f.mu.Lock()
	a.inflight, a.busySince = 1, clock
	clock = clock.Add(time.Second)
	f.answered(b, answer, clock) // b answers after a began holding, then holds nothing
	f.mu.Unlock()
	return f, a, b, &clock
}

// At the run's tail, the other endpoint done with its work and idle, an
// endpoint holding requests unanswered past the floor is taken out (its
// requests move): before, the watch wanted an answer within the floor
// and the tail of a short run waited for generate.timeout.
func TestSilentAtTheTail(t *testing.T) {
	f, a, _, now := silenceFleet(t, 100*time.Millisecond)
	*now = now.Add(28 * time.Second) // 29 s held: under the floor
	f.checkSilence()
	if !a.healthy {
		t.Fatal("taken out before the floor")
	}
	*now = now.Add(2 * time.Second) // 31 s
	f.checkSilence()
	if a.healthy {
		t.Fatal("a hung endpoint holding the tail, the other idle, still in past the floor")
	}
}

// A long answer on an otherwise idle endpoint, at the tail (the other
// idle), is not taken out while it takes less than twice the longest
// answer seen (here 40 s): the tail rule judges by the same time as the
// rest of the run.
func TestSilenceLongAnswerAtTheTail(t *testing.T) {
	f, a, _, now := silenceFleet(t, 40*time.Second)
	*now = now.Add(75 * time.Second) // 76 s held, under 2 × 40 s
	f.checkSilence()
	if !a.healthy {
		t.Fatalf("a long answer (76 s, longest seen 40 s) taken out at the tail (silentAfter %s)", f.silentAfter())
	}
	*now = now.Add(5 * time.Second) // 81 s: past 2 × 40 s
	f.checkSilence()
	if a.healthy {
		t.Fatal("silent past twice the longest answer still in")
	}
}

// A stall of the whole fleet (each endpoint holding requests, none
// answering for longer than the floor, as when this process is
// suspended) takes none out.
func TestSilenceWholeFleetStall(t *testing.T) {
	f, a, b, now := silenceFleet(t, 100*time.Millisecond)
	f.mu.Lock()
	b.inflight, b.busySince = 3, *now
	f.mu.Unlock()
	*now = now.Add(2 * time.Minute)
	if rounds := f.checkSilence(); len(rounds) != 0 {
		t.Fatalf("%d canary rounds while the whole fleet stalled", len(rounds))
	}
	if !a.healthy || !b.healthy {
		t.Fatal("an endpoint taken out while the whole fleet stalled")
	}
}

// sendAll sends n requests ("q0", "q1", …) through c at once and
// fails on any error.
func sendAll(t *testing.T, c *HTTPClient, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Complete(context.Background(), userReq(fmt.Sprint("q", i))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
