package e2e

import (
	"net/http"
	"net/http/httptest"
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
	t.Logf("%d rollouts in %s with one of two endpoints silent", tasks*n, took.Round(time.Millisecond))
}
