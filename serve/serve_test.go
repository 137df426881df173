package serve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// testConfig is a serve config on the simulator: arithmetic tasks, groups
// of 4, the zero-std groups dropped (about half are kept).
func testConfig(t *testing.T, out string, sets ...string) *config.Config {
	t.Helper()
	tasks, err := filepath.Abs("../examples/quickstart/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf(`
source: {path: %q}
prompt: {user: "Solve: {question}"}
repeat: {n: 4, seed: 1}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 16
  params: {temperature: 1.0, max_tokens: 64}
  sim: {seed: 7, accuracy: 0.5}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std}
output: {dir: %q}
serve: {addr: "127.0.0.1:0", commit_interval: 50ms}
`, tasks, out)
	cfg, err := config.Decode([]byte(yml), "serve.yaml", sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// started is a service running in the test's process.
type started struct {
	url    string
	log    func() string
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg *config.Config, opts serve.Options) *started {
	t.Helper()
	return startWith(t, opts, func(ctx context.Context, opts serve.Options) error { return serve.Run(ctx, cfg, opts) })
}

// startWith starts run (serve.Run, serve.Replay) with opts, its log kept,
// and waits until it listens; it stops with the test.
func startWith(t *testing.T, opts serve.Options, run func(context.Context, serve.Options) error) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	opts.Listening = func(a net.Addr) { addr <- a }
	var log bytes.Buffer
	var logMu sync.Mutex
	opts.Stderr = writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return log.Write(p)
	})
	s := &started{cancel: cancel, done: make(chan error, 1)}
	s.log = func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	go func() { s.done <- run(ctx, opts) }()
	select {
	case a := <-addr:
		s.url = "http://" + a.String()
	case err := <-s.done:
		cancel()
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *started) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Error("serve did not stop")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// group is one group of a step as read back.
type group struct {
	task, attempt int64
}

// readStep reads a Parquet step with Arrow's own reader and checks every
// group: complete (group_size rows), with non-zero reward std.
func readStep(t *testing.T, body []byte) map[group]int {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	r, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := r.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	rows := map[group]int{}
	sizes := map[group]int{}
	rewards := map[group][]float64{}
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	for tr.Next() {
		rec := tr.Record()
		col := func(name string) arrow.Array {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("no column %s", name)
			}
			return rec.Column(idx[0])
		}
		tasks := col("task_index").(*array.Int64)
		attempts := col("attempt").(*array.Int32)
		size := col("group_size").(*array.Int32)
		reward := col("reward").(*array.Float64)
		kept := col("kept").(*array.Boolean)
		for i := 0; i < int(rec.NumRows()); i++ {
			g := group{tasks.Value(i), int64(attempts.Value(i))}
			rows[g]++
			sizes[g] = int(size.Value(i))
			rewards[g] = append(rewards[g], reward.Value(i))
			if !kept.Value(i) {
				t.Errorf("group %v: a row not kept", g)
			}
		}
	}
	for g, n := range rows {
		if n != sizes[g] {
			t.Errorf("group %v: %d rows of %d", g, n, sizes[g])
		}
		if std(rewards[g]) == 0 {
			t.Errorf("group %v: reward std 0: %v", g, rewards[g])
		}
	}
	return rows
}

func std(xs []float64) float64 {
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v / float64(len(xs)))
}

// TestServeThreeSteps: three GET /v1/steps/next?groups=8&format=parquet
// answer three disjoint sets of exactly 8 kept groups, each complete with
// non-zero reward std; the headers name the step, the groups and the
// policy versions; the steps are committed under served/.
func TestServeThreeSteps(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "run.progress=50ms"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[group]int64{}
	for i := 1; i <= 3; i++ {
		st, err := c.Next(ctx, 8, client.FormatParquet)
		if err != nil {
			t.Fatal(err)
		}
		if st.Number != int64(i) || st.Groups != 8 || len(st.Versions) != 1 || st.Versions[0] != 0 {
			t.Fatalf("step %d: headers step %d groups %d versions %v", i, st.Number, st.Groups, st.Versions)
		}
		rows := readStep(t, st.Body)
		if len(rows) != 8 {
			t.Fatalf("step %d: %d groups, want 8", i, len(rows))
		}
		for g := range rows {
			if prev, ok := seen[g]; ok {
				t.Fatalf("group %v in steps %d and %d", g, prev, st.Number)
			}
			seen[g] = st.Number
		}
		if _, err := os.Stat(filepath.Join(out, "served", fmt.Sprintf("step-%06d", i), "part-00000.parquet")); err != nil {
			t.Fatal(err)
		}
		if err := c.Ack(ctx, st.Number); err != nil {
			t.Fatal(err)
		}
	}
	status, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Steps.Made != 3 || status.Steps.Acked != 3 || status.Served != 3 {
		t.Fatalf("status %+v", status.Steps)
	}
	// The progress line, every run.progress.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.log(), "steps 3 made, 3 acked, 0 leased") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line for the three steps: %s", s.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeBadRequests: bad parameters get a 400 naming the parameter, an
// ack of a step never served a 404, an oversized body a 413, and the
// service goes on serving.
func TestServeBadRequests(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "serve.max_groups_per_step=64"), serve.Options{})
	for _, tc := range []struct {
		method, path, body string
		code               int
		param              string
	}{
		{"GET", "/v1/steps/next?groups=0", "", 400, "groups"},
		{"GET", "/v1/steps/next?groups=-3", "", 400, "groups"},
		{"GET", "/v1/steps/next?groups=65", "", 400, "groups"},
		{"GET", "/v1/steps/next?groups=x", "", 400, "groups"},
		{"GET", "/v1/steps/next", "", 400, "groups"},
		{"GET", "/v1/steps/next?groups=8&format=xml", "", 400, "format"},
		{"GET", "/v1/steps/next?groups=8&shape=x", "", 400, "shape"},
		{"POST", "/v1/steps/99/ack", "", 404, "step"},
		{"POST", "/v1/steps/abc/ack", "", 400, "step"},
		{"POST", "/v1/policy", `{"version": -1}`, 400, "version"},
		{"POST", "/v1/policy", `{"v": 1}`, 400, "body"},
		{"POST", "/v1/policy", `{}`, 400, "version"},
		{"POST", "/v1/policy", strings.Repeat(" ", serve.MaxBody+1), 413, "body"},
		{"POST", "/v1/pause?mode=stop", "", 400, "mode"},
		{"POST", "/v1/pause", `{"mode": "later"}`, 400, "mode"},
		{"GET", "/v1/nothing", "", 404, ""},
		{"GET", "/v1/policy", "", 405, "method"},
		{"POST", "/v1/steps/next?groups=1", "", 405, "method"},
		{"GET", "/v1/steps/1/ack", "", 405, "method"},
	} {
		req, _ := http.NewRequest(tc.method, s.url+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e client.Error
		decodeJSON(t, resp, &e)
		if resp.StatusCode != tc.code || e.Parameter != tc.param || e.Message == "" {
			t.Errorf("%s %s: %d %+v, want %d naming %q", tc.method, tc.path, resp.StatusCode, e, tc.code, tc.param)
		}
	}
	// The service is undisturbed.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	st, err := c.Next(ctx, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(st.Body), "\n"); n != st.Rows || n != 8 {
		t.Fatalf("jsonl: %d lines, %d rows", n, st.Rows)
	}
	if err := c.SetPolicy(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	if err := c.SetPolicy(ctx, 2); !errors.As(err, &ce) || ce.Status != 409 {
		t.Fatalf("a lower version: %v, want 409", err)
	}
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b := new(bytes.Buffer)
	b.ReadFrom(resp.Body)
	if err := jsonUnmarshal(b.Bytes(), v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// An output directory a run (or another service) holds stops the service
// before it listens or says it serves: the error names the holder, and
// nothing was announced. Before, the service printed "serving on …" and
// exited 1 only when its run found the directory locked.
func TestServeOutputLockedBeforeListening(t *testing.T) {
	out := t.TempDir()
	release, err := resume.LockDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := release(); err != nil {
			t.Error(err)
		}
	}()
	var log bytes.Buffer
	listened := false
	err = serve.Run(context.Background(), testConfig(t, out), serve.Options{
		Stderr:    &log,
		Listening: func(net.Addr) { listened = true },
	})
	if err == nil || !strings.Contains(err.Error(), "in use by another trajflow run") {
		t.Fatalf("serve over a locked output: %v, want in use by another trajflow run", err)
	}
	if listened || strings.Contains(log.String(), "serving on") {
		t.Fatalf("serve announced itself over a locked output: listened %v, log %q", listened, log.String())
	}
	// Released, the same output serves.
	if err := release(); err != nil {
		t.Fatal(err)
	}
	release = func() error { return nil }
	start(t, testConfig(t, out), serve.Options{})
}
