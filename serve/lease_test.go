package serve_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// groupsOf lists the groups of an Arrow step.
func groupsOf(t *testing.T, st *client.Step) []group {
	t.Helper()
	seen := map[group]bool{}
	var out []group
	for _, rec := range st.Records {
		ti := rec.Schema().FieldIndices("task_index")
		ai := rec.Schema().FieldIndices("attempt")
		tasks := rec.Column(ti[0]).(*array.Int64)
		attempts := rec.Column(ai[0]).(*array.Int32)
		for i := 0; i < int(rec.NumRows()); i++ {
			g := group{tasks.Value(i), int64(attempts.Value(i))}
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	slices.SortFunc(out, func(a, b group) int { return int(a.task - b.task) })
	return out
}

// TestServeLeaseRunsOut: a step not acknowledged within serve.lease is
// served again, whole and under its number, to the next caller; once
// acknowledged it is not, and the next step holds other groups.
func TestServeLeaseRunsOut(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "serve.lease=600ms"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := client.New(s.url, ""), client.New(s.url, "")
	first, err := a.Next(ctx, 4, "")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	if first.Groups != 4 || len(groupsOf(t, first)) != 4 {
		t.Fatalf("step of %d groups (%d read), want 4", first.Groups, len(groupsOf(t, first)))
	}
	time.Sleep(800 * time.Millisecond)
	again, err := b.Next(ctx, 4, "")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	if again.Number != first.Number || !slices.Equal(groupsOf(t, again), groupsOf(t, first)) {
		t.Fatalf("after the lease ran out: step %d %v, want step %d %v again", again.Number, groupsOf(t, again), first.Number, groupsOf(t, first))
	}
	if err := b.Ack(ctx, again.Number); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(ctx, first.Number); err != nil { // idempotent
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	next, err := a.Next(ctx, 4, "")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release()
	if next.Number == first.Number {
		t.Fatal("an acknowledged step was served again")
	}
	for _, g := range groupsOf(t, next) {
		if slices.Contains(groupsOf(t, first), g) {
			t.Fatalf("group %v in steps %d and %d", g, first.Number, next.Number)
		}
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reserved != 1 || st.Expired < 1 || st.Steps.Acked != 1 || st.Steps.Leased != 1 {
		t.Fatalf("status: %+v", st)
	}
}

// TestServeConcurrentCallers: callers asking at once get disjoint steps.
func TestServeConcurrentCallers(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir()), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const callers = 4
	var wg sync.WaitGroup
	steps := make([]*client.Step, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			steps[i], errs[i] = client.New(s.url, "").Next(ctx, 3, "")
		}()
	}
	wg.Wait()
	owner := map[group]int64{}
	numbers := map[int64]bool{}
	for i, st := range steps {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer st.Release()
		if numbers[st.Number] {
			t.Fatalf("step %d served to two callers", st.Number)
		}
		numbers[st.Number] = true
		gs := groupsOf(t, st)
		if len(gs) != 3 {
			t.Fatalf("step %d: %d groups", st.Number, len(gs))
		}
		for _, g := range gs {
			if prev, ok := owner[g]; ok {
				t.Fatalf("group %v in steps %d and %d", g, prev, st.Number)
			}
			owner[g] = st.Number
		}
	}
}

// TestServeToken: off loopback a bearer token is required: without
// serve.token_env, or with its variable empty, serve refuses to start
// naming the key; with it, every endpoint but /healthz answers 401 to a
// request without the token, and the token is in no log line.
func TestServeToken(t *testing.T) {
	const token = "s3cret-serve-token-value"
	lookup := func(name string) (string, bool) {
		if name == "TF_SERVE_TOKEN" {
			return token, true
		}
		return "", false
	}
	cfg := testConfig(t, t.TempDir(), "serve.addr=0.0.0.0:0")
	err := serve.Run(context.Background(), cfg, serve.Options{LookupEnv: lookup})
	var invalid *config.ValidationError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "serve.token_env") {
		t.Fatalf("no token: %v, want a config error naming serve.token_env", err)
	}
	cfg = testConfig(t, t.TempDir(), "serve.addr=0.0.0.0:0", "serve.token_env=TF_UNSET_TOKEN")
	if err := serve.Run(context.Background(), cfg, serve.Options{LookupEnv: lookup}); !errors.As(err, &invalid) || !strings.Contains(err.Error(), "serve.token_env") || !strings.Contains(err.Error(), "TF_UNSET_TOKEN") {
		t.Fatalf("an unset variable: %v", err)
	}

	cfg = testConfig(t, t.TempDir(), "serve.addr=0.0.0.0:0", "serve.token_env=TF_SERVE_TOKEN")
	s := start(t, cfg, serve.Options{LookupEnv: lookup})
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/steps/next?groups=1"},
		{"POST", "/v1/steps/1/ack"},
		{"POST", "/v1/policy"},
		{"POST", "/v1/pause"},
		{"POST", "/v1/resume"},
		{"GET", "/v1/status"},
		{"GET", "/nothing"},
	} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
			req, _ := http.NewRequest(tc.method, s.url+tc.path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with %q: %d, want 401", tc.method, tc.path, auth, resp.StatusCode)
			}
		}
	}
	resp, err := http.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, token)
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	if _, err := client.New(s.url, "").Status(ctx); !errors.As(err, &ce) || ce.Status != 401 || strings.Contains(err.Error(), token) {
		t.Fatalf("no token: %v", err)
	}
	s.stop(t)
	if l := s.log(); strings.Contains(l, token) || !strings.Contains(l, "serving on") {
		t.Fatalf("the log holds the token, or is not the service's: %s", l)
	}
}

// TestServeRestart: after a stop and a start on the same output, the
// policy version is the one set, the acknowledged step is not served
// again, the one not acknowledged stays leased for what is left of its
// recorded lease and is then served again (whole, under its number), and
// the next step holds groups of neither.
func TestServeRestart(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t, testConfig(t, out, "serve.lease=2s"), serve.Options{})
	c := client.New(s.url, "")
	acked, err := c.Next(ctx, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	defer acked.Release()
	if err := c.Ack(ctx, acked.Number); err != nil {
		t.Fatal(err)
	}
	open, err := c.Next(ctx, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Release()
	if err := c.SetPolicy(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s.stop(t)

	s = start(t, testConfig(t, out, "serve.lease=2s"), serve.Options{})
	c = client.New(s.url, "")
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PolicyVersion != 4 || st.Steps.Made != 2 || st.Steps.Acked != 1 || st.Steps.Leased+st.Steps.Pending != 1 {
		t.Fatalf("restarted: version %d, steps %+v", st.PolicyVersion, st.Steps)
	}
	for deadline := time.Now().Add(30 * time.Second); st.Steps.Pending != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the recorded lease never ran out: %+v", st.Steps)
		}
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	again, err := c.Next(ctx, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	if again.Number != open.Number || !slices.Equal(groupsOf(t, again), groupsOf(t, open)) {
		t.Fatalf("restarted: step %d %v, want step %d %v again", again.Number, groupsOf(t, again), open.Number, groupsOf(t, open))
	}
	next, err := c.Next(ctx, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release()
	for _, g := range groupsOf(t, next) {
		if slices.Contains(groupsOf(t, open), g) || slices.Contains(groupsOf(t, acked), g) {
			t.Fatalf("group %v served twice", g)
		}
	}
}

// TestServeTaskOrder: under groups.order: task the steps hold the kept
// groups in task order: every task of a step comes before those of the
// next.
func TestServeTaskOrder(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "groups.order=task"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	last := int64(-1)
	for range 3 {
		st, err := c.Next(ctx, 4, "")
		if err != nil {
			t.Fatal(err)
		}
		gs := groupsOf(t, st)
		st.Release()
		if len(gs) != 4 || gs[0].task <= last {
			t.Fatalf("step %d: groups %v after task %d", st.Number, gs, last)
		}
		last = gs[len(gs)-1].task
		if err := c.Ack(ctx, st.Number); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServePauseSurvivesRestart: a service stopped while paused comes
// back paused, in the same mode, and generates nothing until resumed; a
// resume is recorded too.
func TestServePauseSurvivesRestart(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t, testConfig(t, out), serve.Options{})
	c := client.New(s.url, "")
	if err := c.Pause(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	s.stop(t)

	s = start(t, testConfig(t, out), serve.Options{})
	c = client.New(s.url, "")
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.PauseMode != "keep" {
		t.Fatalf("restarted: paused %v mode %q, want paused (keep)", st.Paused, st.PauseMode)
	}
	if !strings.Contains(s.log(), "POST /v1/resume to go on") {
		t.Fatalf("the log does not say it is paused:\n%s", s.log())
	}
	// Paused, nothing is generated: a step needing one group more than
	// the first run queued (before its pause took hold; the service
	// generates ahead from the start) does not come, and the queue does
	// not grow.
	queued := st.QueuedGroups
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Next(short, queued+1, "")
	stop()
	if err == nil {
		t.Fatalf("a step of %d groups was made while paused with %d queued", queued+1, queued)
	}
	if st, err = c.Status(ctx); err != nil || st.QueuedGroups != queued {
		t.Fatalf("paused, the queue went from %d to %d groups (%v)", queued, st.QueuedGroups, err)
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	step, err := c.Next(ctx, queued+1, "")
	if err != nil {
		t.Fatal(err)
	}
	step.Release()
	s.stop(t)

	s = start(t, testConfig(t, out), serve.Options{})
	c = client.New(s.url, "")
	if st, err = c.Status(ctx); err != nil || st.Paused {
		t.Fatalf("restarted after the resume: %+v, %v", st, err)
	}
}
