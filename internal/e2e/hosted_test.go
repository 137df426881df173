package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/sim"
)

// hostedConfig writes a run config against an HTTP endpoint; extra is
// appended to the generate section (indented by two spaces).
func hostedConfig(t *testing.T, dir, name, tasks, endpoint, out, generate, env string) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: hosted, progress: 0}
source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: 1, seed: 99}
generate:
  endpoints: [%s]
  model: sim-math
  params: {temperature: 1.0, max_tokens: 64}
  max_attempts: 8
  backoff_base: 20ms
  backoff_max: 2s
%s
env: {name: math, answer_field: expected_answer%s}
groups: {keep: all}
output: {dir: %s, file_rows: 50}
`, q(tasks), q(endpoint), generate, env, q(out))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRateLimitAndCache runs 200 requests against a server that enforces
// a requests-per-minute limit and sends x-ratelimit-* headers: with
// generate.rate_limit at the server's limit, under 2% are refused for rate
// (and those are retried); without it, many are. A rerun with the same
// generate.cache sends no request and writes the same rows.
func TestRateLimitAndCache(t *testing.T) {
	const tasks, rpm = 200, 6000 // 100 a second, a burst of 100
	dir := t.TempDir()
	taskFile := writeTasks(t, dir, tasks, 5)
	start := func(t *testing.T) (*sim.Server, *atomic.Int64, string) {
		s := sim.New(sim.Options{Seed: 3, Model: "sim-math", RateLimit: sim.RateLimit{RequestsPerMinute: rpm, Window: time.Second}})
		var chat atomic.Int64
		h := s.Handler()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				chat.Add(1)
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(func() { ts.Close(); s.Close() })
		return s, &chat, ts.URL + "/v1"
	}
	cacheDir := filepath.Join(dir, "cache")
	limited := fmt.Sprintf("  concurrency: 64\n  rate_limit: {requests_per_minute: %d}\n  cache: %s\n  price: {input_per_mtok: 1, output_per_mtok: 2}", rpm, cacheDir)

	// Without the limiter the server refuses many: the test can tell.
	s0, _, ep0 := start(t)
	res := run(t, "run", hostedConfig(t, dir, "free.yaml", taskFile, ep0, filepath.Join(dir, "free"), "  concurrency: 64", ""))
	if res.code != 0 {
		t.Fatalf("run without a limit: exit %d\n%s", res.code, res.stderr)
	}
	free := s0.RateStats()
	t.Logf("without generate.rate_limit: %d accepted, %d refused for rate", free.Accepted, free.Limited)
	if free.Limited < tasks/10 {
		t.Fatalf("without generate.rate_limit the server refused only %d of %d: the workload does not test the limiter", free.Limited, free.Accepted)
	}

	s1, chat1, ep1 := start(t)
	out1 := filepath.Join(dir, "first")
	res = run(t, "run", hostedConfig(t, dir, "first.yaml", taskFile, ep1, out1, limited, ""))
	if res.code != 0 {
		t.Fatalf("first run: exit %d\n%s", res.code, res.stderr)
	}
	st := s1.RateStats()
	t.Logf("with generate.rate_limit: %d accepted, %d refused for rate, %d chat requests", st.Accepted, st.Limited, chat1.Load())
	if float64(st.Limited) >= 0.02*tasks {
		t.Fatalf("%d of %d requests refused for rate, want under 2%%", st.Limited, tasks)
	}
	if st.Accepted != tasks {
		t.Fatalf("the server answered %d requests, want %d (each refused one retried)", st.Accepted, tasks)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("response cache: 0 hits, %d misses", tasks)) {
		t.Fatalf("summary lacks the cache line:\n%s", res.stdout)
	}
	cost := regexp.MustCompile(`cost: (\S+) \(generate.price; every request of this run: data, filtered and error rows\)`).FindStringSubmatch(res.stdout)
	if cost == nil || cost[1] == "0.0000" {
		t.Fatalf("the first run's summary lacks its cost:\n%s", res.stdout)
	}
	first := readDataset(t, filepath.Join(out1, "data"))
	if len(first.rows) != tasks {
		t.Fatalf("%d rows, want %d", len(first.rows), tasks)
	}
	for k, r := range first.rows {
		if r.Status != "ok" {
			t.Fatalf("row %+v: %s %s", k, r.Status, r.Error)
		}
	}

	// The rerun (another output directory, the same cache) sends nothing.
	_, chat2, ep2 := start(t)
	out2 := filepath.Join(dir, "second")
	res = run(t, "run", hostedConfig(t, dir, "second.yaml", taskFile, ep2, out2, limited, ""))
	if res.code != 0 {
		t.Fatalf("rerun: exit %d\n%s", res.code, res.stderr)
	}
	if n := chat2.Load(); n != 0 {
		t.Fatalf("the rerun sent %d requests, want 0", n)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("response cache: %d hits, 0 misses", tasks)) {
		t.Fatalf("summary lacks the cache line:\n%s", res.stdout)
	}
	// Nothing was sent, so nothing was spent; what the answers were worth
	// is the first run's cost.
	if want := fmt.Sprintf("cost: 0.0000 (generate.price; every request of this run: data, filtered and error rows; not counted: %d answers from generate.cache, worth %s)", tasks, cost[1]); !strings.Contains(res.stdout, want) {
		t.Fatalf("the rerun's summary lacks %q:\n%s", want, res.stdout)
	}
	second := readDataset(t, filepath.Join(out2, "data"))
	if len(second.rows) != len(first.rows) {
		t.Fatalf("rerun: %d rows, want %d", len(second.rows), len(first.rows))
	}
	for k, a := range first.rows {
		b := second.rows[k]
		if b == nil {
			t.Fatalf("rerun lacks row %+v", k)
		}
		if da, db := deterministic(a), deterministic(b); !reflect.DeepEqual(da, db) {
			t.Fatalf("row %+v differs on the rerun:\n%+v\n%+v", k, da, db)
		}
	}
}

// TestBatchAPIKilledAndResumed runs generate.api: batch against the
// simulator's Batch API and kills the run (SIGKILL) three times: when its
// first create call arrives (the input file uploaded, no batch created),
// when a create call has created its batch but before the answer (the run
// never hears of it), and at the first poll of a batch it recorded. Each
// time it is started again; in the end the server has seen every request
// submitted exactly once and every result is committed.
func TestBatchAPIKilledAndResumed(t *testing.T) {
	const tasks = 100
	dir := t.TempDir()
	taskFile := writeTasks(t, dir, tasks, 11)
	s := sim.New(sim.Options{Seed: 3, Model: "sim-math", BatchDelay: 300 * time.Millisecond})
	h := s.Handler()

	var mu sync.Mutex
	var cur *exec.Cmd
	var exited chan struct{}
	phase := 0 // 0: kill at the create call; 1: kill after creating; 2: kill at a poll; 3: let it be
	kill := func() {
		mu.Lock()
		c, ex := cur, exited
		mu.Unlock()
		if c != nil {
			_ = c.Process.Kill()
			<-ex
		}
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		p := phase
		mu.Unlock()
		switch {
		case p == 0 && r.Method == http.MethodPost && r.URL.Path == "/v1/batches":
			kill()
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		case p == 1 && r.Method == http.MethodPost && r.URL.Path == "/v1/batches":
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			kill()
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		case p == 2 && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/batches/"):
			kill()
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { ts.Close(); s.Close() })

	out := filepath.Join(dir, "out")
	cfg := hostedConfig(t, dir, "batch.yaml", taskFile, ts.URL+"/v1", out,
		"  api: batch\n  concurrency: 1000\n  batch: {max_requests: 40, flush_after: 100ms, poll_interval: 50ms}", ", max_turns: 1")
	for p := 0; p <= 3; p++ {
		mu.Lock()
		phase = p
		cmd := exec.Command(binary, "run", cfg)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		ex := make(chan struct{})
		cur, exited = cmd, ex
		mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait(); close(ex) }()
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("phase %d: the run did not end\n%s", p, stderr.String())
		}
		mu.Lock()
		cur = nil
		mu.Unlock()
		st := s.BatchStats()
		t.Logf("phase %d: exit %v; server: %d uploads, %d batches, %d lines", p, err, st.Uploads, st.Batches, st.Lines)
		if p < 3 {
			if cmd.ProcessState.ExitCode() != -1 {
				t.Fatalf("phase %d: the run was not killed (exit %d)\n%s", p, cmd.ProcessState.ExitCode(), stderr.String())
			}
			continue
		}
		if err != nil {
			t.Fatalf("last run: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		if !strings.Contains(stdout.String(), "batch API:") {
			t.Fatalf("summary lacks the batch line:\n%s", stdout.String())
		}
	}
	st := s.BatchStats()
	if len(st.Submitted) != tasks || st.Lines != tasks {
		t.Fatalf("the server saw %d distinct requests in %d lines, want %d each", len(st.Submitted), st.Lines, tasks)
	}
	for id, n := range st.Submitted {
		if n != 1 {
			t.Fatalf("request %s submitted %d times", id, n)
		}
	}
	ds := readDataset(t, filepath.Join(out, "data"))
	if len(ds.rows) != tasks {
		t.Fatalf("%d rows committed, want %d", len(ds.rows), tasks)
	}
	for k, r := range ds.rows {
		if r.Status != "ok" || r.NumTurns != 1 {
			t.Fatalf("row %+v: %s (%d turns) %s", k, r.Status, r.NumTurns, r.Error)
		}
	}
}
