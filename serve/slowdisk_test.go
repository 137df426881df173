package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
)

// GET /v1/status and a Prometheus scrape answer while a change is being
// recorded on a disk that does not finish (the test holds the write until
// they have answered): the state is written outside the ledger's lock.
// The change's own answer comes only after the state file records it, and
// the status shows the change only then.
func TestStatusAndMetricsWhileStateIsWritten(t *testing.T) {
	dir := t.TempDir()
	var slow atomic.Bool
	writing := make(chan struct{}, 1)
	release := make(chan struct{})
	persist := func(st *state) error {
		if slow.Load() {
			writing <- struct{}{}
			<-release
		}
		return saveState(dir, st)
	}
	s, err := newService(serviceConfig{Dir: dir, State: &state{Version: stateVersion, Next: 1}, Lease: time.Minute, MaxK: 8, Persist: persist})
	if err != nil {
		t.Fatal(err)
	}
	defer s.led.close()
	// Step 1, recorded at the disk's usual speed.
	s.led.enqueue(testGroups(0, 2), nil)
	g := granted(t, s.led.wait(2, 0, 0))
	if err := s.led.recordStep(&stepState{Step: s.led.reserve(), Groups: []groupRef{g.fresh[0].ref, g.fresh[1].ref}}); err != nil {
		t.Fatal(err)
	}

	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", h.routes())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	status := func() client.Status {
		t.Helper()
		body := get("/v1/status")
		var st client.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	recorded := func() state {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, schema.ServeStateFile))
		if err != nil {
			t.Fatal(err)
		}
		var st state
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	get("/v1/status") // a connection to reuse
	slow.Store(true)

	for _, tt := range []struct {
		name, path, body string
		shown            func(client.Status) bool // the change, in the status
		inFile           func(state) bool         // the change, in the state file
	}{
		{"ack", "/v1/steps/1/ack", "", func(st client.Status) bool { return st.Steps.Acked == 1 },
			func(st state) bool { return st.Steps[0].Acked }},
		{"policy", "/v1/policy", `{"version": 3}`, func(st client.Status) bool { return st.PolicyVersion == 3 },
			func(st state) bool { return st.Policy == 3 }},
		{"pause", "/v1/pause?mode=keep", "", func(st client.Status) bool { return st.Paused && st.PauseMode == "keep" },
			func(st state) bool { return st.Paused == "keep" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			type answer struct {
				code int
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				resp, err := srv.Client().Post(srv.URL+tt.path, "application/json", strings.NewReader(tt.body))
				if err != nil {
					done <- answer{err: err}
					return
				}
				resp.Body.Close()
				done <- answer{code: resp.StatusCode}
			}()
			<-writing
			// The write is held: these answer only if the state is
			// written outside the ledger's lock (else the test hangs
			// here and its timeout names it).
			for _, path := range []string{"/v1/status", "/metrics", "/v1/status", "/metrics"} {
				get(path)
			}
			if tt.shown(status()) {
				t.Error("the status shows the change before it is recorded")
			}
			select {
			case a := <-done:
				t.Fatalf("POST %s answered (%d %v) before the state was recorded", tt.path, a.code, a.err)
			default:
			}
			release <- struct{}{}
			a := <-done
			if a.err != nil || a.code != 200 {
				t.Fatalf("POST %s: %d %v", tt.path, a.code, a.err)
			}
			if !tt.inFile(recorded()) || !tt.shown(status()) {
				t.Errorf("after the answer: recorded %+v, status %+v", recorded(), status())
			}
		})
	}
}

// The state file keeps its mode when replaced, and a new one is 0644 less
// the umask (not CreateTemp's 0600).
func TestStateFileMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, schema.ServeStateFile)
	st := &state{Version: stateVersion, Next: 1}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o044 == 0 {
		t.Fatalf("a new state file is %v, want readable by group and others (0644 less the umask)", fi.Mode().Perm())
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	if fi, err = os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("replaced: %v %v, want 0640 kept", fi.Mode().Perm(), err)
	}
}
