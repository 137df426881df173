package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSilentEndpointRun: trajflow run over a sim-server and an endpoint
// that accepts every request and never answers. The silent endpoint is
// taken out once it has held requests for generate.silence_after while
// the other answers, named in the run's log; its requests go to the
// sim-server, and the run ends with every rollout ok long before
// generate.timeout (before, its tail waited for the timeout).
func TestSilentEndpointRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a sim-server process and a run (skipped under -short)")
	}
	const tasks, n = 150, 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	hungDone := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the preflight's GET /models
			w.Write([]byte(`{"data":[{"id":"sim-math"}]}`))
			return
		}
		select {
		case <-hungDone:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(hungDone)
	srv := simServer(t, "--time-scale", "0.05")
	cfg := defaultConfig(t, dir, "config.yaml", writeTasks(t, dir, tasks, 5), out, srv, 0)
	start := time.Now()
	res := run(t, "run", cfg, "--set", `generate.endpoints=["`+srv+`", "`+hung.URL+`/v1"]`,
		"--set", "generate.silence_after=1s", "--set", "generate.timeout=5m", "--set", "generate.concurrency=32")
	took := time.Since(start)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	if took > 2*time.Minute {
		t.Fatalf("the run took %s with one endpoint silent (generate.timeout 5m)", took)
	}
	if !strings.Contains(res.stderr, "endpoint "+hung.URL+"/v1 taken out (silent: no answer for") {
		t.Fatalf("the log does not name the silent endpoint:\n%s", res.stderr)
	}
	if rows := len(readDataset(t, filepath.Join(out, "data")).rows); rows != tasks*n {
		t.Fatalf("%d rows, want %d", rows, tasks*n)
	}
	// metrics.json counts the attempts moved off the silent endpoint.
	b, err := os.ReadFile(filepath.Join(out, "metrics.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		LastRun struct {
			Endpoints []struct {
				Endpoint                           string
				Requests, Retries, Failures, Moved int64
			} `json:"endpoints"`
		} `json:"last_run"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	eps := m.LastRun.Endpoints
	if len(eps) != 2 || eps[1].Endpoint != hung.URL+"/v1" || eps[1].Moved == 0 || eps[1].Failures < eps[1].Moved || eps[0].Retries == 0 {
		t.Fatalf("metrics.json last_run.endpoints %+v: want the silent endpoint's attempts moved and retried on the other", eps)
	}
	t.Logf("%d rollouts in %s with one of two endpoints silent; %+v", tasks*n, took.Round(time.Millisecond), eps)
}
