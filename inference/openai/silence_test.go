package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// hungServer accepts requests and answers none until the test ends.
func hungServer(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s.URL + "/v1"
}

// One endpoint of two accepts requests and never answers: once it has
// held requests for SilenceAfter while the other answers, it is taken out
// as silent (logged, by name), its requests move to the other, and every
// request succeeds long before the request timeout.
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
	var logMu sync.Mutex
	var log strings.Builder
	c := newClient(t, cfg, HTTPOptions{SilenceAfter: 300 * time.Millisecond, Logf: func(f string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&log, f+"\n", a...)
	}})
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
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
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("100 requests took %s with one endpoint silent", took)
	}
	st := c.Stats()
	if st[1].Healthy || st[1].Moved == 0 || !st[0].Healthy {
		t.Fatalf("stats %+v: want the silent endpoint out with its requests moved", st)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "endpoint "+strings.TrimSuffix(hung, "")+" taken out (silent: no answer for") {
		t.Fatalf("the log does not name the silent endpoint:\n%s", log.String())
	}
}

// When no endpoint answers (engines still loading), none is taken out:
// silence is judged against endpoints that answer.
func TestSilenceNeedsAnAnsweringFleet(t *testing.T) {
	a, b := hungServer(t), hungServer(t)
	cfg := testConfig(a, b)
	cfg.Timeout = pipeline.Duration(time.Minute)
	c := newClient(t, cfg, HTTPOptions{SilenceAfter: 100 * time.Millisecond})
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
		if !s.Healthy || s.Moved != 0 {
			t.Fatalf("stats %+v: an endpoint taken out while none answered", c.Stats())
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
	f.sil.lastAnswer = now
	f.mu.Unlock()
	f.checkSilence()
	if !a.healthy {
		t.Fatal("an endpoint holding requests for 8 s taken out while answers take 5 s")
	}
	now = now.Add(3 * time.Second) // 11 s: past 2 × 5 s
	f.mu.Lock()
	f.sil.lastAnswer = now
	f.mu.Unlock()
	f.checkSilence()
	if a.healthy {
		t.Fatal("an endpoint silent for twice the longest answer still in")
	}
}
