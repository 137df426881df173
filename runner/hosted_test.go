package runner_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
)

// generate.rate_limit and generate.cache decorate the client: their
// figures reach the snapshot, Prometheus and the summary, and a rerun
// with the cache is answered from it.
func TestHostedFigures(t *testing.T) {
	cache := t.TempDir()
	addr := freeAddr(t)
	// 160 requests at 3000 a minute: a burst of 50, then 50 a second; the
	// generate stage's first requests alone (generate.concurrency) are more
	// than the burst, however slow the machine.
	sets := []string{"source.limit=40", "generate.cache=" + cache, "generate.rate_limit.requests_per_minute=3000"}
	cfg := quickstart(t, append(sets, "run.metrics_addr="+addr, "run.progress=50ms")...)

	var mu sync.Mutex
	var scraped string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			scraped = string(b)
			mu.Unlock()
		}
	}()
	var stderr lockedBuffer
	sum, err := run(t, cfg, runner.Options{Stderr: &stderr})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	h := sum.Hosted
	if h.CacheHits != 0 || h.CacheMisses != 160 {
		t.Fatalf("first run: %+v", h)
	}
	if h.RateLimitWait < 100*time.Millisecond {
		t.Fatalf("160 requests at 50 a second (a burst of 50) waited only %s", h.RateLimitWait)
	}
	if !strings.Contains(sum.String(), "response cache: 0 hits, 160 misses") || !strings.Contains(sum.String(), "rate limit: requests waited") {
		t.Fatalf("summary:\n%s", sum)
	}
	mu.Lock()
	for _, want := range []string{`trajflow_cache_requests_total{result="miss"}`, `trajflow_rate_limit_wait_seconds_total`, `trajflow_rate_limit_waiting`, `trajflow_rate_limit_429_total{outcome="resent"}`} {
		if !strings.Contains(scraped, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	mu.Unlock()
	if out := stderr.String(); !strings.Contains(out, ", rate limit: ") || !strings.Contains(out, ", cache 0 hits, ") {
		t.Errorf("the progress lines lack the rate limit and the cache:\n%s", out)
	}
	first := readBack(t, cfg.Output.Dir, "data")

	cfg2 := quickstart(t, sets...)
	sum2, err := run(t, cfg2, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h := sum2.Hosted; h.CacheHits != 160 || h.CacheMisses != 0 {
		t.Fatalf("rerun: %+v", h)
	}
	second := readBack(t, cfg2.Output.Dir, "data")
	if len(first) != len(second) || len(first) != 160 {
		t.Fatalf("%d rows, then %d", len(first), len(second))
	}
	byKey := map[string]string{}
	for _, r := range first {
		byKey[keys([]*pipeline.Rollout{r})[0]] = r.Messages[len(r.Messages)-1].Content
	}
	for _, r := range second {
		if got, want := r.Messages[len(r.Messages)-1].Content, byKey[keys([]*pipeline.Rollout{r})[0]]; got != want {
			t.Fatalf("reply %q on the rerun, %q before", got, want)
		}
	}
}

// lockedBuffer is a buffer safe for the progress goroutine's writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
