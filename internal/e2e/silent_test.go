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
// that answers GET /models and holds every completion, with the silence
// watch's defaults. The silent endpoint is taken out once its canary goes
// unanswered while the sim-server answers the same, named in the run's
// log; its requests go to the sim-server, and the run ends with every
// rollout ok long before the 30 s floor of generate.silence_after (before
// the canary, the run waited out the floor; before the tail rule, its
// tail waited for generate.timeout).
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
		"--set", "generate.timeout=5m", "--set", "generate.concurrency=32")
	took := time.Since(start)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	if took > 25*time.Second {
		t.Fatalf("the run took %s with one endpoint silent (the floor is 30 s: the canary did not decide)", took)
	}
	if !strings.Contains(res.stderr, "endpoint "+hung.URL+"/v1 taken out (silent: no answer for") ||
		!strings.Contains(res.stderr, "canary request had no answer") {
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
				Endpoint                                     string
				Requests, Retries, Failures, Moved, Canaries int64
			} `json:"endpoints"`
		} `json:"last_run"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	eps := m.LastRun.Endpoints
	if len(eps) != 2 || eps[1].Endpoint != hung.URL+"/v1" || eps[1].Moved == 0 || eps[1].Failures < eps[1].Moved || eps[0].Retries == 0 ||
		eps[1].Canaries == 0 || eps[0].Canaries == 0 {
		t.Fatalf("metrics.json last_run.endpoints %+v: want the silent endpoint's attempts moved and retried on the other, and the canaries counted on both", eps)
	}
	t.Logf("%d rollouts in %s with one of two endpoints silent; %+v", tasks*n, took.Round(time.Millisecond), eps)
}
