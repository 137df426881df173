package openai

import (
	"context"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/leak"
)

// gate holds requests until it is opened, counting arrivals.
type gate struct {
	arrived atomic.Int64
	open    chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) handle(w http.ResponseWriter, r *http.Request, n int) {
	g.arrived.Add(1)
	select {
	case <-g.open:
		io.WriteString(w, okBody)
	case <-r.Context().Done():
	}
}

// fire starts n Completes with the given affinity keys (cycled) and
// returns a wait function for their errors.
func fire(c *HTTPClient, n int, keys ...string) func() []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := userReq("x")
			if len(keys) > 0 {
				req.Affinity = keys[i%len(keys)]
			}
			_, errs[i] = c.Complete(context.Background(), req)
		}(i)
	}
	return func() []error { wg.Wait(); return errs }
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}

func TestLeastOutstanding(t *testing.T) {
	t.Cleanup(leak.Check(t))
	g := newGate()
	var srvs []*server
	var urls []string
	for i := 0; i < 3; i++ {
		s := newServer(t, g.handle)
		srvs = append(srvs, s)
		urls = append(urls, s.URL)
	}
	c := newClient(t, testConfig(urls...), HTTPOptions{})
	wait := fire(c, 9)
	waitFor(t, "9 requests in flight", func() bool { return g.arrived.Load() == 9 })
	for i, st := range c.Stats() {
		if st.InFlight != 3 {
			t.Errorf("endpoint %d has %d in flight, want 3: %+v", i, st.InFlight, c.Stats())
		}
	}
	close(g.open)
	noErrors(t, wait())
	for i, s := range srvs {
		if s.calls.Load() != 3 {
			t.Errorf("server %d got %d requests, want 3", i, s.calls.Load())
		}
	}
}

func TestAffinity(t *testing.T) {
	var srvs []*server
	var urls []string
	for i := 0; i < 4; i++ {
		s := newServer(t, nil)
		srvs = append(srvs, s)
		urls = append(urls, s.URL)
	}
	c := newClient(t, testConfig(urls...), HTTPOptions{})
	// Sequential requests of one key stay on one endpoint, across "turns".
	byKey := map[string]string{}
	for round := 0; round < 3; round++ {
		for k := 0; k < 40; k++ {
			key := fmt.Sprintf("group-%d", k)
			resp, err := c.Complete(context.Background(), &inference.Request{Messages: userReq("x").Messages, Affinity: key})
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := byKey[key]; ok && prev != resp.Endpoint {
				t.Errorf("%s moved from %s to %s", key, prev, resp.Endpoint)
			}
			byKey[key] = resp.Endpoint
		}
	}
	// Different keys spread over the fleet.
	for i, s := range srvs {
		if s.calls.Load() == 0 {
			t.Errorf("server %d got no key of 40", i)
		}
	}
}

func TestAffinityYieldsToLoad(t *testing.T) {
	g := newGate()
	var urls []string
	for i := 0; i < 3; i++ {
		s := newServer(t, g.handle)
		urls = append(urls, s.URL)
	}
	c := newClient(t, testConfig(urls...), HTTPOptions{AffinitySlack: 2})
	pref := -1
	var waits []func() []error
	// With slack 2 and every other endpoint idle, the preferred endpoint
	// takes requests while it has at most 2 outstanding: 3 requests.
	for i := 1; i <= 5; i++ {
		waits = append(waits, fire(c, 1, "g"))
		waitFor(t, "request in flight", func() bool { return g.arrived.Load() == int64(i) })
		if pref < 0 {
			for j, st := range c.Stats() {
				if st.InFlight == 1 {
					pref = j
				}
			}
		}
	}
	st := c.Stats()
	if st[pref].InFlight != 3 {
		t.Errorf("preferred endpoint has %d in flight, want 3: %+v", st[pref].InFlight, st)
	}
	for j := range st {
		if j != pref && st[j].InFlight != 1 {
			t.Errorf("endpoint %d has %d in flight, want 1 (overflow to the least loaded)", j, st[j].InFlight)
		}
	}
	close(g.open)
	for _, w := range waits {
		noErrors(t, w())
	}
}

func TestEjectAndProbeBack(t *testing.T) {
	t.Cleanup(leak.Check(t))
	a := newServer(t, nil)
	b := newServer(t, nil)
	var down atomic.Bool
	down.Store(true)
	a.setHandle(func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, okBody)
	})
	var probes atomic.Int64
	a.setHealth(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if down.Load() || r.URL.Path != "/v1/models" {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, `{"data":[]}`)
	})
	var mu sync.Mutex
	var logs []string
	logf := func(f string, args ...any) { mu.Lock(); logs = append(logs, fmt.Sprintf(f, args...)); mu.Unlock() }
	c := newClient(t, testConfig(a.URL, b.URL), HTTPOptions{EjectAfter: 2, ProbeInterval: 5 * time.Millisecond, Logf: logf})
	// Every request succeeds (retried on b) while a fails twice and is out.
	for i := 0; i < 6; i++ {
		if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats()
	if st[0].Healthy || st[0].Requests != 2 || st[0].Failures != 2 {
		t.Errorf("a: %+v, want out after 2 failures and no further requests", st[0])
	}
	if !st[1].Healthy || st[1].Requests != 6 {
		t.Errorf("b: %+v, want all 6 requests", st[1])
	}
	waitFor(t, "a probed", func() bool { return probes.Load() >= 2 })
	if c.Stats()[0].Healthy {
		t.Fatal("a back in while its probe fails")
	}
	down.Store(false)
	waitFor(t, "a back in", func() bool { return c.Stats()[0].Healthy })
	for i := 0; i < 4; i++ {
		if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Stats()[0].Requests; got != 4 {
		t.Errorf("a got %d requests after coming back, want 4 (of 2+4)", got-2)
	}
	mu.Lock()
	defer mu.Unlock()
	var out, in bool
	for _, l := range logs {
		out = out || contains(l, "taken out")
		in = in || contains(l, "back in")
	}
	if !out || !in {
		t.Errorf("health changes not logged: %q", logs)
	}
}

func TestAllOutStillTried(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.WriteHeader(502)
			return
		}
		io.WriteString(w, okBody)
	})
	s.setHealth(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	cfg := testConfig(s.URL)
	cfg.MaxAttempts = 2
	c := newClient(t, cfg, HTTPOptions{EjectAfter: 1, ProbeInterval: time.Hour})
	if _, err := c.Complete(context.Background(), userReq("x")); inference.ErrorClass(err) != inference.ClassServer {
		t.Fatalf("err %v", err)
	}
	if c.Stats()[0].Healthy {
		t.Fatal("endpoint not out")
	}
	down.Store(false)
	// The only endpoint is out and the probe never answers; it is still
	// tried, and a success puts it back.
	if _, err := c.Complete(context.Background(), userReq("x")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats()[0]; !st.Healthy || st.Requests != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestLeastRecentlyFailedWhenAllOut(t *testing.T) {
	now := time.Unix(1000, 0)
	eps := []*endpoint{{idx: 0, base: "a"}, {idx: 1, base: "b"}, {idx: 2, base: "c"}}
	f := newFleet(eps, 0, 8, 1, func() time.Time { return now }, nil)
	for i, e := range eps {
		e.healthy = false
		e.lastFail = now.Add(time.Duration(3-i) * time.Second) // c failed first
	}
	if e := f.pickLocked("", make([]bool, 3)); e != eps[2] {
		t.Errorf("picked %v, want c (least recently failed)", e)
	}
}

func TestConcurrencyLimits(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, okBody)
	}
	t.Run("global", func(t *testing.T) {
		var total, maxTotal atomic.Int64
		h := func(w http.ResponseWriter, r *http.Request, n int) {
			cur := total.Add(1)
			for m := maxTotal.Load(); cur > m && !maxTotal.CompareAndSwap(m, cur); m = maxTotal.Load() {
			}
			slow(w, r, n)
			total.Add(-1)
		}
		a, b := newServer(t, h), newServer(t, h)
		cfg := testConfig(a.URL, b.URL)
		cfg.Concurrency = 3
		c := newClient(t, cfg, HTTPOptions{})
		noErrors(t, fire(c, 30)())
		if m := maxTotal.Load(); m > 3 || m < 1 {
			t.Errorf("max concurrent over the fleet %d, want <= 3", m)
		}
	})
	t.Run("per endpoint", func(t *testing.T) {
		a, b := newServer(t, slow), newServer(t, slow)
		cfg := testConfig(a.URL, b.URL)
		cfg.Concurrency = 100
		cfg.EndpointConcurrency = 2
		c := newClient(t, cfg, HTTPOptions{})
		noErrors(t, fire(c, 30, "k1", "k2", "k3")())
		for i, s := range []*server{a, b} {
			if m := s.max.Load(); m > 2 {
				t.Errorf("server %d saw %d concurrent, want <= 2", i, m)
			}
		}
		if a.calls.Load()+b.calls.Load() != 30 {
			t.Errorf("calls %d + %d", a.calls.Load(), b.calls.Load())
		}
	})
	t.Run("wait honours ctx", func(t *testing.T) {
		g := newGate()
		s := newServer(t, g.handle)
		cfg := testConfig(s.URL)
		cfg.Concurrency = 1
		c := newClient(t, cfg, HTTPOptions{})
		wait := fire(c, 1)
		waitFor(t, "first request in flight", func() bool { return g.arrived.Load() == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := c.Complete(ctx, userReq("x"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the context's deadline", err)
		}
		if s.calls.Load() != 1 {
			t.Errorf("the waiting request reached the server")
		}
		close(g.open)
		noErrors(t, wait())
	})
}

func TestNoGoroutineLeftAfterClose(t *testing.T) {
	t.Cleanup(leak.Check(t))
	a := newServer(t, status(500, ""))
	var probes atomic.Int64
	a.setHealth(func(w http.ResponseWriter, r *http.Request) { probes.Add(1); w.WriteHeader(503) })
	b := newServer(t, nil)
	cfg := testConfig(a.URL, b.URL)
	cfg.Timeout = pipeline.Duration(time.Second)
	c, err := NewHTTP(cfg, HTTPOptions{EjectAfter: 1, ProbeInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	noErrors(t, fire(c, 20, "x", "y")())
	waitFor(t, "probes of the ejected endpoint", func() bool { return probes.Load() >= 4 })
	c.Close()
	// A probe sent just before Close may still land, late on a loaded
	// machine; a prober left running (every millisecond) never goes
	// quiet for 100 ms.
	last, quietSince := probes.Load(), time.Now()
	waitFor(t, "the probes to stop after Close", func() bool {
		if n := probes.Load(); n != last {
			last, quietSince = n, time.Now()
		}
		return time.Since(quietSince) >= 100*time.Millisecond
	})
	time.Sleep(200 * time.Millisecond)
	if probes.Load() != last {
		t.Error("probes go on after Close")
	}
}
