package runner_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/runner"
)

// vllmMetrics is what a vLLM server's /metrics holds of its load.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="sim-math"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="sim-math"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="sim-math"} 0.42
`

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// With run.metrics_addr set, /metrics serves trajflow_ metrics that move
// during the run, next to the endpoint's own load scraped from its vLLM
// /metrics; Options.Progress receives the same snapshot.
func TestMetricsEndpointAndProgress(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Preset: "short", Accuracy: 0.5, Model: "sim-math", TimeScale: 0.2})
	defer s.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, vllmMetrics) })
	mux.Handle("/", s.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := freeAddr(t)
	// A token given as the URL's user name: never in a label or snapshot.
	const token = "sk-user-token-5f2a"
	endpoint := strings.Replace(srv.URL, "http://", "http://"+token+"@", 1) + "/v1"
	cfg := quickstart(t, "source.limit=60", "generate.endpoints=["+endpoint+"]", "generate.concurrency=8",
		"run.metrics_addr="+addr, "run.progress=100ms")

	var mu sync.Mutex
	var snaps []runner.Snapshot
	scrapes := make(chan string, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var scraping sync.WaitGroup
	scraping.Add(1)
	go func() {
		defer scraping.Done()
		for ctx.Err() == nil {
			time.Sleep(150 * time.Millisecond)
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			select {
			case scrapes <- string(b):
			default:
			}
		}
	}()
	sum, err := run(t, cfg, runner.Options{Progress: func(s runner.Snapshot) {
		mu.Lock()
		snaps = append(snaps, s)
		mu.Unlock()
	}})
	cancel()
	scraping.Wait()
	if err != nil {
		t.Fatal(err)
	}
	close(scrapes)
	var got []string
	for s := range scrapes {
		got = append(got, s)
	}
	if len(got) < 2 {
		t.Fatalf("%d scrapes during the run, want 2 or more", len(got))
	}
	first, last := got[0], got[len(got)-1]
	for _, g := range got {
		if strings.Contains(g, token) {
			t.Fatalf("/metrics shows the URL's user name:\n%s", g)
		}
	}
	if !strings.Contains(last, `endpoint="http://[REDACTED]@127.0.0.1`) {
		t.Errorf("/metrics lacks the redacted endpoint label")
	}
	for _, want := range []string{
		`trajflow_rollouts_total{status="ok"}`, `trajflow_rollouts_dispatched_total`, `trajflow_groups_total{reason="",result="kept"}`,
		`trajflow_tokens_generated_total`, `trajflow_inflight{side="generation"}`, `trajflow_requests_in_flight{endpoint=`,
		`trajflow_request_duration_seconds_bucket{endpoint=`, `trajflow_env_step_duration_seconds_count`,
		`trajflow_queue_depth{after="loop"}`, `trajflow_committed_rows_total`, `trajflow_tasks_read_total`,
		`trajflow_endpoint_server_running_requests{endpoint=`, `trajflow_endpoint_server_kv_cache_usage{endpoint=`,
	} {
		if !strings.Contains(last, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if metricValue(first, `trajflow_tokens_generated_total`) >= metricValue(last, `trajflow_tokens_generated_total`) {
		t.Errorf("trajflow_tokens_generated_total did not move: %v then %v", metricValue(first, `trajflow_tokens_generated_total`), metricValue(last, `trajflow_tokens_generated_total`))
	}

	mu.Lock()
	defer mu.Unlock()
	if len(snaps) < 2 {
		t.Fatalf("%d progress snapshots, want 2 or more", len(snaps))
	}
	end := snaps[len(snaps)-1]
	for _, s := range snaps {
		for _, e := range s.Endpoints {
			if strings.Contains(e.Endpoint, token) {
				t.Fatalf("a snapshot shows the URL's user name: %s", e.Endpoint)
			}
		}
	}
	if end.Resolved() != sum.OK+sum.Errors+sum.Cancelled+sum.Filtered || end.TasksRead != 60 || end.RowsCommitted != sum.Rows {
		t.Errorf("last snapshot %+v, summary %+v", end, sum)
	}
	if len(end.Endpoints) != 1 || !end.Endpoints[0].Server.OK || end.Endpoints[0].Server.Running != 7 || end.Endpoints[0].Server.Waiting != 3 || end.Endpoints[0].Server.KVCache != 0.42 {
		t.Errorf("endpoint load %+v, want the server's running 7, waiting 3, KV cache 0.42", end.Endpoints)
	}
}

// metricValue is the value of the first line of text starting with name.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+" ") {
			var v float64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, name+" "), &v); err == nil {
				return v
			}
		}
	}
	return -1
}

func TestSnapshotETA(t *testing.T) {
	tests := []struct {
		s    runner.Snapshot
		want time.Duration
		ok   bool
	}{
		{runner.Snapshot{Elapsed: 10 * time.Second, Target: 20, GroupsKept: 5, GroupsFinished: 10}, 30 * time.Second, true},
		{runner.Snapshot{Elapsed: 10 * time.Second, TaskLimit: 100, GroupsFinished: 25}, 30 * time.Second, true},
		{runner.Snapshot{Elapsed: 10 * time.Second, GroupsFinished: 25}, 0, false},
		{runner.Snapshot{Elapsed: 0, Target: 20}, 0, false},
	}
	for _, tt := range tests {
		got, ok := tt.s.ETA()
		if ok != tt.ok || got.Round(time.Second) != tt.want {
			t.Errorf("%+v: ETA %v %v, want %v %v", tt.s, got, ok, tt.want, tt.ok)
		}
	}
}

// /metrics scraped without pause from the moment it listens, while the
// build steps after the output step (held up by a slow preflight) build
// the client, the generator and the source: the statistics read only
// parts the run has published (go test -race finds a read of a part being
// built).
func TestMetricsWhileBuilding(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Preset: "short", Accuracy: 0.5, Model: "sim-math"})
	defer s.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // the preflight: the walk waits here
		s.Handler().ServeHTTP(w, r)
	})
	mux.Handle("/", s.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := freeAddr(t)
	cfg := quickstart(t, "source.limit=20", "generate.endpoints=["+srv.URL+"/v1]", "run.metrics_addr="+addr, "run.progress=10ms")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var scrapes atomic.Int64
	var scraping sync.WaitGroup
	scraping.Add(1)
	go func() {
		defer scraping.Done()
		for ctx.Err() == nil {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			scrapes.Add(1)
		}
	}()
	_, err := run(t, cfg, runner.Options{Progress: func(runner.Snapshot) {}})
	cancel()
	scraping.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if scrapes.Load() < 2 {
		t.Fatalf("%d scrapes during the run, want 2 or more", scrapes.Load())
	}
}
