package runner_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// checkCommitted reads data/ back and checks that it holds whole groups of
// n, each key once, as many rows as the summary says were committed, and
// that metrics.json was written; it returns the rows.
func checkCommitted(t *testing.T, cfg *config.Config, sum *runner.Summary) []*pipeline.Rollout {
	t.Helper()
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if sum != nil && int64(len(rows)) != sum.Rows {
		t.Fatalf("%d rows committed, summary says %d", len(rows), sum.Rows)
	}
	seen := map[string]bool{}
	perGroup := map[pipeline.GroupKey]int{}
	for _, r := range rows {
		k := keys([]*pipeline.Rollout{r})[0]
		if seen[k] {
			t.Fatalf("%s committed twice", k)
		}
		seen[k] = true
		perGroup[r.GroupKey()]++
		if r.Status == pipeline.StatusCancelled || r.Status == pipeline.StatusError {
			t.Fatalf("%s in data/ with status %s", k, r.Status)
		}
	}
	for g, n := range perGroup {
		if n != cfg.Repeat.N {
			t.Fatalf("group %+v has %d of %d rows", g, n, cfg.Repeat.N)
		}
	}
	if len(rows) > 0 {
		if _, err := os.Stat(filepath.Join(cfg.Output.Dir, schema.MetricsFile)); err != nil {
			t.Fatalf("metrics.json: %v", err)
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, "*", ".part-*.tmp"))
	if len(tmps) > 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
	return rows
}

func runCtx(t *testing.T, ctx context.Context, cfg *config.Config, opts runner.Options) (*runner.Summary, error) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	opts.Alloc = alloc
	sum, err := runner.Run(ctx, cfg, opts)
	if n := alloc.CurrentAlloc(); n != 0 {
		t.Errorf("%d Arrow bytes left allocated after the run", n)
	}
	return sum, err
}

// accounted checks that every rollout dispatched resolved once.
func accounted(t *testing.T, sum *runner.Summary) {
	t.Helper()
	if sum.Dispatched != sum.OK+sum.Errors+sum.Cancelled+sum.Filtered {
		t.Fatalf("dispatched %d != ok %d + error %d + cancelled %d + filtered %d", sum.Dispatched, sum.OK, sum.Errors, sum.Cancelled, sum.Filtered)
	}
}

// TestStopCommitsFinishedGroups: cancelling a run's context (a signal)
// with the default settings (file_rows 100000: no file would be committed
// before the end) commits every finished group and writes metrics.json;
// the rerun completes the data with every rollout exactly once.
func TestStopCommitsFinishedGroups(t *testing.T) {
	defer leak.Check(t)()
	for _, mode := range []string{"cancel", "drain"} {
		t.Run(mode, func(t *testing.T) {
			cfg := quickstart(t, "generate.sim.time_scale=0.1", "run.on_signal="+mode)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(500*time.Millisecond, cancel)
			sum, err := runCtx(t, ctx, cfg, runner.Options{})
			if err == nil {
				t.Skip("the run finished before the stop")
			}
			if !errors.Is(err, runner.ErrInterrupted) || !errors.Is(err, context.Canceled) || sum == nil {
				t.Fatalf("got %v, want ErrInterrupted", err)
			}
			accounted(t, sum)
			rows := checkCommitted(t, cfg, sum)
			if len(rows) == 0 || len(rows) >= 960 {
				t.Fatalf("%d rows committed by the stop; summary %+v", len(rows), sum)
			}
			if mode == "drain" && sum.Cancelled != 0 {
				t.Fatalf("drain cancelled %d rollouts", sum.Cancelled)
			}
			if !strings.Contains(sum.Stop, "interrupted") {
				t.Fatalf("summary's stop: %q", sum.Stop)
			}
			t.Logf("%s: stop committed %d rows, cancelled %d", mode, len(rows), sum.Cancelled)

			sum2, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if all := checkCommitted(t, cfg, nil); len(all) != 960 {
				t.Fatalf("after the rerun: %d rows, want 960", len(all))
			}
			if sum2.Resumed == 0 {
				t.Fatalf("rerun skipped nothing: %+v", sum2)
			}
		})
	}
}

// TestFatalErrorCommitsFinishedGroups: a bad input row (on_bad_row:
// error) stops the run with its error, but the groups finished before it
// are committed and metrics.json written.
func TestFatalErrorCommitsFinishedGroups(t *testing.T) {
	defer leak.Check(t)()
	root, _ := filepath.Abs("..")
	b, err := os.ReadFile(filepath.Join(root, "examples/quickstart/tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	bad := strings.Join(lines[:150], "") + "{not json\n" + strings.Join(lines[150:], "")
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	os.WriteFile(path, []byte(bad), 0o644)
	cfg := quickstart(t, "source.path="+path, "generate.sim.time_scale=0.01")
	sum, err := run(t, cfg, runner.Options{})
	if err == nil || errors.Is(err, runner.ErrInterrupted) || !strings.Contains(err.Error(), "tasks.jsonl:151") {
		t.Fatalf("got %v, want the bad row's error", err)
	}
	accounted(t, sum)
	rows := checkCommitted(t, cfg, sum)
	if len(rows) == 0 {
		t.Fatalf("nothing committed; summary %+v", sum)
	}
	t.Logf("bad row at line 151: %d rows committed, %d cancelled", len(rows), sum.Cancelled)
}

// TestCommitInterval: output.commit_interval commits the open file on a
// timer whatever file_rows is.
func TestCommitInterval(t *testing.T) {
	cfg := quickstart(t, "generate.sim.time_scale=0.1", "source.limit=120", "output.commit_interval=50ms")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Duration < 200*time.Millisecond {
		t.Skipf("the run took %s: too short for the timer to fire", sum.Duration)
	}
	if len(sum.Files) < 2 {
		t.Fatalf("%d files in a run of %s with commit_interval 50ms", len(sum.Files), sum.Duration)
	}
	if rows := checkCommitted(t, cfg, sum); len(rows) != 480 {
		t.Fatalf("%d rows", len(rows))
	}
}

// flaky fails the requests of rollouts whose seed is not a multiple of
// three (a group of four always has a failing member) while failing is
// set, with an error no retry fixes.
type flaky struct {
	inner   inference.Client
	failing atomic.Bool
}

func (f *flaky) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	if seed, _ := req.Params["seed"].(int64); f.failing.Load() && seed%3 != 0 {
		return nil, &inference.Error{Class: inference.ClassHTTP, Status: 400, Msg: "simulated failure"}
	}
	return f.inner.Complete(ctx, req)
}

// TestErrorRateStopsAndResumeRedoesErrors: a run whose rollouts mostly
// fail stops with ErrErrorRate; the groups with a failed member are in
// errors/, never in data/; a rerun after the fix redoes them, and data/
// then holds every rollout exactly once, all ok. With resume_errors: keep
// the rerun leaves them.
func TestErrorRateStopsAndResumeRedoesErrors(t *testing.T) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 7, Preset: "short", Accuracy: 0.6})
	defer s.Close()
	client := &flaky{inner: s}
	client.failing.Store(true)
	cfg := quickstart(t, "source.limit=100")
	sum, err := run(t, cfg, runner.Options{Client: client})
	if !errors.Is(err, runner.ErrErrorRate) || !strings.Contains(err.Error(), "run.max_error_rate") {
		t.Fatalf("got %v, want ErrErrorRate", err)
	}
	accounted(t, sum)
	checkCommitted(t, cfg, sum)
	errRows := readBack(t, cfg.Output.Dir, schema.ErrorsDir)
	if len(errRows) == 0 {
		t.Fatal("no rows in errors/")
	}

	// resume_errors: keep: the failed groups count as done.
	keep := *cfg
	keep.Run.ResumeErrors = "keep"
	sumKeep, err := run(t, &keep, runner.Options{Client: &flaky{inner: s}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(errRows) / 4); sumKeep.Resumed < want {
		t.Fatalf("keep: resumed %d tasks, want at least the %d failed ones", sumKeep.Resumed, want)
	}
	if all := checkCommitted(t, cfg, nil); len(all)+len(errRows) != 400 {
		t.Fatalf("keep: %d rows in data/ + %d in errors/, want 400", len(all), len(errRows))
	}

	// The default: a rerun after the fix redoes them.
	cfg2 := quickstart(t, "source.limit=100", "output.dir="+t.TempDir())
	if _, err := run(t, cfg2, runner.Options{Client: client}); !errors.Is(err, runner.ErrErrorRate) {
		t.Fatalf("got %v, want ErrErrorRate", err)
	}
	client.failing.Store(false)
	sum2, err := run(t, cfg2, runner.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	all := checkCommitted(t, cfg2, nil)
	if len(all) != 400 || sum2.Errors != 0 {
		t.Fatalf("after the fix: %d rows in data/, want 400; summary %+v", len(all), sum2)
	}
	for _, r := range all {
		if r.Status != pipeline.StatusOK {
			t.Fatalf("%s: %s", r, r.Status)
		}
	}
}

// TestEndpointRefusingTheKeyFailsFast: a server answering 401 to
// everything fails the endpoint check before any data is read; one that
// answers its model list but 401 to every completion opens the circuit
// breaker within seconds. After the fix the rerun commits every rollout
// ok.
func TestEndpointRefusingTheKeyFailsFast(t *testing.T) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 7, Preset: "short", Accuracy: 0.6, Model: "sim-math"})
	defer s.Close()
	var mode atomic.Int32 // 0: 401 to everything, 1: 401 to completions, 2: fixed
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := mode.Load(); m == 0 || m == 1 && r.Method == http.MethodPost {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Invalid API key"}}`)
			return
		}
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	cfg := quickstart(t, "source.limit=60", "generate.endpoints=["+srv.URL+"/v1]")

	start := time.Now()
	sum, err := run(t, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrEndpoint) || !strings.Contains(err.Error(), "API key was refused") || sum != nil {
		t.Fatalf("401 everywhere: got %v (summary %+v)", err, sum)
	}
	if entries, _ := os.ReadDir(filepath.Join(cfg.Output.Dir, schema.DataDir)); len(entries) > 0 {
		t.Fatalf("the failed check left %d entries in data/", len(entries))
	}

	mode.Store(1)
	sum, err = run(t, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrEndpoint) || !strings.Contains(err.Error(), "circuit breaker open") || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("401 to completions: got %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("the breaker took %s", el)
	}
	accounted(t, sum)
	checkCommitted(t, cfg, sum)

	mode.Store(2)
	sum, err = run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := checkCommitted(t, cfg, nil)
	if len(all) != 240 || sum.Errors != 0 {
		t.Fatalf("after the fix: %d rows, want 240 ok; summary %+v", len(all), sum)
	}
}
