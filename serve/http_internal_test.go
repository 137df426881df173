package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/stages/generate"
)

// Every route of the table answers another method with a 405 whose Allow
// header names the route's method, and its own method with something else
// than a 404 or a 405: the mux and the 405s come from the one table.
func TestRouteTable405(t *testing.T) {
	s, err := newService(serviceConfig{Dir: t.TempDir(), MaxK: 4, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.led.close()
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	srv := httptest.NewServer(h.routes())
	defer srv.Close()
	for _, rt := range h.routeTable() {
		path := strings.ReplaceAll(rt.path, "{n}", "1")
		other := map[string]string{"GET": "DELETE", "POST": "PUT"}[rt.method]
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			req, _ := http.NewRequest(other, srv.URL+path, nil)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != rt.method {
				t.Fatalf("%s %s: %d, Allow %q; want 405, Allow %s", other, path, resp.StatusCode, resp.Header.Get("Allow"), rt.method)
			}
			if rt.path == "/v1/steps/next" {
				return // a valid request would wait for a step
			}
			req, _ = http.NewRequest(rt.method, srv.URL+path, nil)
			resp, err = srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusMethodNotAllowed || (resp.StatusCode == http.StatusNotFound && rt.path != "/v1/steps/{n}/ack") {
				t.Fatalf("%s %s: %d", rt.method, path, resp.StatusCode)
			}
		})
	}
}

// The service's errors, however wrapped, get their status and parameter
// from errorAnswers; any other error is a 500.
func TestErrorAnswers(t *testing.T) {
	for _, tt := range []struct {
		err   error
		code  int
		param string
	}{
		{fmt.Errorf("step 9 %w", errNeverServed), 404, "step"},
		{fmt.Errorf("policy version 1 is below the current version 2: %w", errVersionBelow), 409, "version"},
		{fmt.Errorf("pause mode %q: %w", "x", errPauseMode), 400, "mode"},
		{fmt.Errorf("%w: 2 kept groups are queued", errEnded), 503, ""},
		{errStopping, 503, ""},
		{fmt.Errorf("recording the ack of step 3: %w", fmt.Errorf("%w: disk full", errNotRecorded)), 500, ""},
		{fmt.Errorf("recording the ack of step 3: %w", fmt.Errorf("%w: %w", errNotRecorded, &fs.PathError{Op: "write", Path: "state.json", Err: syscall.ENOSPC})), 503, ""},
		{fmt.Errorf("recording the ack of step 3: %w", fmt.Errorf("%w: %w", errNotRecorded, &fs.PathError{Op: "sync", Path: "state.json", Err: syscall.EIO})), 503, ""},
		{errors.New("policy version is below the current version"), 500, ""},
	} {
		var logged []string
		h := &handler{logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
		w := httptest.NewRecorder()
		h.failWith(w, tt.err)
		if w.Code != tt.code || !strings.Contains(w.Body.String(), `"parameter":"`+tt.param+`"`) && tt.param != "" {
			t.Errorf("%v: %d %s, want %d naming %q", tt.err, w.Code, w.Body, tt.code, tt.param)
		}
		if (tt.code == 500 || errors.Is(tt.err, errNotRecorded)) != (len(logged) == 1) {
			t.Errorf("%v: logged %v; a 500 or a change not recorded is logged, nothing else", tt.err, logged)
		}
		reason := `"reason":"disk_full"`
		if errors.Is(tt.err, syscall.EIO) {
			reason = `"reason":"io_error"`
		}
		if full := tt.code == 503 && errors.Is(tt.err, errNotRecorded); full != (w.Header().Get("Retry-After") != "") ||
			full && !strings.Contains(w.Body.String(), reason) {
			t.Errorf("%v: Retry-After %q, body %s; a full disk or an I/O error is a 503 %s with Retry-After", tt.err, w.Header().Get("Retry-After"), w.Body, reason)
		}
	}
}
