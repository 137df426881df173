package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// freeAddr is a loopback address nothing listens on, for a service to be
// started on, stopped and started again.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeClientAcrossRestart: a trainer's loop (Next, Ack) goes on
// while the service is stopped and, half a second later, started again
// on the same address: the client retries the refused connections and
// the 503s of the stop; no group reaches the trainer in two steps, and
// every step it trained on is acknowledged.
func TestServeClientAcrossRestart(t *testing.T) {
	out, addr := t.TempDir(), freeAddr(t)
	s := start(t, testConfig(t, out, "serve.addr="+addr), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c := client.New(s.url, "")
	c.Retry = client.Retry{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Deadline: time.Minute}
	var mu sync.Mutex
	var retried []string
	c.Retry.OnRetry = func(err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		retried = append(retried, err.Error())
	}
	const steps = 8
	restart := make(chan struct{})
	loop := make(chan error, 1)
	var trained []*client.Step // read by the test once loop has answered
	go func() {
		loop <- func() error {
			for i := range steps {
				st, err := c.Next(ctx, 2, client.FormatParquet)
				if err != nil {
					return err
				}
				trained = append(trained, st)
				if i == 2 {
					close(restart) // the service restarts while the trainer trains
					time.Sleep(100 * time.Millisecond)
				}
				if err := c.Ack(ctx, st.Number); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	<-restart
	s.stop(t)
	time.Sleep(500 * time.Millisecond)
	start(t, testConfig(t, out, "serve.addr="+addr), serve.Options{}) // stopped by its cleanup
	if err := <-loop; err != nil {
		t.Fatalf("the trainer's loop stopped: %v", err)
	}
	seen := map[group]int64{}
	for _, st := range trained {
		for g := range readStep(t, st.Body) {
			if prev, ok := seen[g]; ok {
				t.Fatalf("group %v in steps %d and %d", g, prev, st.Number)
			}
			seen[g] = st.Number
		}
	}
	mu.Lock()
	refused := strings.Contains(strings.Join(retried, "\n"), "refused")
	mu.Unlock()
	if !refused {
		t.Fatalf("the loop met no refused connection: the test did not restart the service under it (%q)", retried)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Acked != steps || st.Steps.Pending != 0 || st.LastAckedStep != steps || st.NextStep != steps+1 {
		t.Fatalf("after the loop: steps %+v, last acked %d, next %d; want %d acknowledged", st.Steps, st.LastAckedStep, st.NextStep, steps)
	}
}

// TestServePauseTimeout: with serve.pause_timeout a pause no resume ends
// is ended by the service, logged with who paused; the status shows the
// pause's mode, since when and by whom until then. A pause by a query
// parameter names that by.
func TestServePauseTimeout(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "serve.pause_timeout=300ms"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	c.Name = "trainer rank 0"
	before := time.Now()
	if err := c.Pause(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.PauseMode != "keep" || st.PausedBy != "trainer rank 0" || st.PausedSince.Before(before.Add(-time.Second)) || st.PausedSince.After(time.Now()) {
		t.Fatalf("paused: %v %q since %v by %q", st.Paused, st.PauseMode, st.PausedSince, st.PausedBy)
	}
	if want := st.PausedSince.Add(300 * time.Millisecond); !st.PauseExpires.Equal(want) {
		t.Fatalf("pause_expires %v, want %v (paused_since + pause_timeout)", st.PauseExpires, want)
	}
	deadline := time.Now().Add(30 * time.Second)
	for st.Paused {
		if time.Now().After(deadline) {
			t.Fatalf("the pause was not ended by serve.pause_timeout: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(s.log(), "by trainer rank 0") || !strings.Contains(s.log(), "serve.pause_timeout") {
		t.Fatalf("the log does not say which pause ended:\n%s", s.log())
	}
	if !st.PausedSince.IsZero() || st.PausedBy != "" {
		t.Fatalf("resumed, the status still shows the pause: %+v", st)
	}
	// A step comes again.
	step, err := c.Next(ctx, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	step.Release()

	// by as a query parameter; without one and without the header, the
	// caller's address.
	for _, tc := range []struct{ query, header, want string }{
		{"?by=rank-7", "rank-1", "rank-7"},
		{"", "", "127.0.0.1:"},
	} {
		req, _ := http.NewRequest("POST", s.url+"/v1/pause"+tc.query, nil)
		if tc.header != "" {
			req.Header.Set(client.HeaderClient, tc.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(st.PausedBy, tc.want) {
			t.Fatalf("pause %q: %d, by %q, want %q", tc.query, resp.StatusCode, st.PausedBy, tc.want)
		}
	}
}

// TestServeVersionConflict: a policy version below the service's is a
// 409 that names the current version and says what to do.
func TestServeVersionConflict(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir()), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	if err := c.SetPolicy(ctx, 5); err != nil {
		t.Fatal(err)
	}
	err := c.SetPolicy(ctx, 3)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Parameter != "version" || ce.PolicyVersion == nil || *ce.PolicyVersion != 5 {
		t.Fatalf("%v (%+v), want a 409 naming version and the current version 5", err, ce)
	}
	for _, want := range []string{"current version 5", "GET /v1/status", "POST /v1/resume"} {
		if !strings.Contains(ce.Message, want) {
			t.Fatalf("the 409 says %q, nothing of %q", ce.Message, want)
		}
	}
	// The raw body: policy_version beside error and parameter.
	resp, err := http.Post(s.url+"/v1/policy", "application/json", strings.NewReader(`{"version": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if body["policy_version"] != 5.0 || body["parameter"] != "version" {
		t.Fatalf("409 body %v", body)
	}
}

// TestServeRebuildsUnwrittenStep: a step is served once the state records
// it, its folder written beside; a crash between the two leaves a
// recorded step without its folder, which the next start writes again
// from data/: the same groups, and the Parquet answer of the step served
// again is that file.
func TestServeRebuildsUnwrittenStep(t *testing.T) {
	out, addr := t.TempDir(), freeAddr(t)
	cfg := func() *config.Config { return testConfig(t, out, "serve.addr="+addr, "serve.lease=1s") }
	s := start(t, cfg(), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(s.url, "")
	first, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	want := readStep(t, first.Body)
	s.stop(t)
	// What a crash before the folder was written leaves.
	if err := os.RemoveAll(filepath.Join(out, schema.ServedDir, schema.ServedStepDir(first.Number))); err != nil {
		t.Fatal(err)
	}
	start(t, cfg(), serve.Options{}) // stopped by its cleanup
	b, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServedStepFile(first.Number)))
	if err != nil {
		t.Fatalf("the recorded step's folder was not written again: %v", err)
	}
	if got := readStep(t, b); !maps.Equal(got, want) {
		t.Fatalf("step %d written again holds %v, served %v", first.Number, got, want)
	}
	// Unacknowledged past its lease, it is served again from that file.
	time.Sleep(1200 * time.Millisecond)
	again, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if again.Number != first.Number || !maps.Equal(readStep(t, again.Body), want) {
		t.Fatalf("served again: step %d of %v, want step %d of %v", again.Number, readStep(t, again.Body), first.Number, want)
	}
}

// TestServePauseTimeoutDefault: a pause has a limit unless one says
// otherwise: 30 minutes, shown in the status (pause_expires), so that a
// trainer that dies between pause and resume does not leave the fleet
// paused for good; serve.pause_timeout 0 keeps a pause until a resume.
func TestServePauseTimeoutDefault(t *testing.T) {
	for _, tt := range []struct {
		sets []string
		want time.Duration
	}{
		{nil, config.DefaultServePauseTimeout},
		{[]string{"serve.pause_timeout=0"}, 0},
	} {
		s := start(t, testConfig(t, t.TempDir(), tt.sets...), serve.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := client.New(s.url, "")
		if err := c.Pause(ctx, "keep"); err != nil {
			t.Fatal(err)
		}
		st, err := c.Status(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tt.want == 0 && !st.PauseExpires.IsZero():
			t.Errorf("%v: pause_expires %v, want none", tt.sets, st.PauseExpires)
		case tt.want > 0 && !st.PauseExpires.Equal(st.PausedSince.Add(tt.want)):
			t.Errorf("%v: pause_expires %v, want %v after %v", tt.sets, st.PauseExpires, tt.want, st.PausedSince)
		}
	}
}
