package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/generate"
)

// simAgent is the sim-agent example's config, rooted at the repository.
func simAgent(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("..")
	sets = append([]string{
		"source.path=" + filepath.Join(root, "examples/sim-agent/tasks.jsonl"),
		"output.dir=" + t.TempDir(),
		"run.progress=0",
	}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/sim-agent/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// simHTTP serves the simulator over HTTP, as vLLM would.
func simHTTP(t *testing.T, o sim.Options) string {
	t.Helper()
	s := sim.New(o)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv.URL + "/v1"
}

// allRows reads back every row a run committed, in every output folder.
func allRows(t *testing.T, dir string) []*pipeline.Rollout {
	t.Helper()
	var out []*pipeline.Rollout
	for _, sub := range []string{schema.DataDir, schema.FilteredDir, schema.ErrorsDir} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			continue
		}
		rs, err := readback.Dir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

// noEmptyOK fails on an ok row that generated nothing.
func noEmptyOK(t *testing.T, rows []*pipeline.Rollout) {
	t.Helper()
	for _, r := range rows {
		if r.Status == pipeline.StatusOK && r.CompletionTokens == 0 {
			t.Fatalf("%s: an ok row with 0 generated tokens (turns %d, finish %q)", r, r.NumTurns, r.FinishReason)
		}
	}
}

// TestContextLengthFirstTurn: a server whose context (512 tokens) cannot
// hold any prompt plus max_tokens 512 refuses every first request: each
// rollout is a context_length error row, logged in failures.jsonl, and
// the run fails as having generated nothing.
func TestContextLengthFirstTurn(t *testing.T) {
	url := simHTTP(t, sim.Options{Seed: 3, Preset: "short", Model: "sim-math", MaxModelLen: 512})
	cfg := quickstart(t, "source.limit=5", "generate.endpoints=["+url+"]", "generate.params.max_tokens=512", "run.max_error_rate=1")
	sum, err := run(t, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrNothingGenerated) || !strings.Contains(err.Error(), "context_length=20") {
		t.Fatalf("err %v", err)
	}
	if sum == nil || sum.Errors != 20 || sum.ErrorClasses[inference.ClassContextLength] != 20 || sum.OK != 0 {
		t.Fatalf("summary %+v", sum)
	}
	rows := allRows(t, cfg.Output.Dir)
	if len(rows) != 20 {
		t.Fatalf("%d rows committed", len(rows))
	}
	noEmptyOK(t, rows)
	for _, r := range rows {
		if r.ErrorClass != inference.ClassContextLength || !strings.Contains(r.Error, "maximum context length is 512") {
			t.Fatalf("%s: class %q error %q", r, r.ErrorClass, r.Error)
		}
	}
	failures, rerr := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.FailuresFile))
	if rerr != nil || strings.Count(string(failures), `"context_length"`) != 20 {
		t.Fatalf("failures.jsonl: %v\n%s", rerr, failures)
	}
	// run.max_error_rate counts them: the run stops on the error rate.
	cfg = quickstart(t, "source.limit=5", "generate.endpoints=["+url+"]", "generate.params.max_tokens=512")
	if _, err := run(t, cfg, runner.Options{}); !errors.Is(err, runner.ErrErrorRate) || !strings.Contains(err.Error(), "context_length=20") {
		t.Fatalf("with run.max_error_rate 0.5: %v", err)
	}
}

// TestContextLengthLaterTurn: a refusal after the first turn ends the
// trajectory truncated with its turns, the refusal in its error column,
// counted in the summary.
func TestContextLengthLaterTurn(t *testing.T) {
	url := simHTTP(t, sim.Options{Seed: 5, Preset: "agent", Model: "sim", MinTurns: 4, MaxTurns: 8, ObsTokens: 64, MaxModelLen: 420})
	cfg := simAgent(t, "source.limit=4", "repeat.n=2", "generate.endpoints=["+url+"]", "generate.params.max_tokens=100", "groups.keep=all")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := allRows(t, cfg.Output.Dir)
	noEmptyOK(t, rows)
	var cut int64
	for _, r := range rows {
		if r.FinishReason != generate.FinishContextLength {
			continue
		}
		cut++
		if r.Status != pipeline.StatusOK || !r.Truncated || r.NumTurns == 0 || !strings.Contains(r.Error, "maximum context length is 420") {
			t.Fatalf("%s: status %s truncated %v turns %d error %q", r, r.Status, r.Truncated, r.NumTurns, r.Error)
		}
	}
	if cut == 0 || sum.ContextTruncated != cut || !strings.Contains(sum.String(), "context-length refusals after the first turn") {
		t.Fatalf("%d rows cut by the context, summary %d:\n%s", cut, sum.ContextTruncated, sum)
	}
}

// TestFirstPromptOverMaxSeqLenRun: a multi-turn env whose first prompt
// exceeds env.max_seq_len gives prompt_too_long error rows and the run
// fails as having generated nothing.
func TestFirstPromptOverMaxSeqLenRun(t *testing.T) {
	url := simHTTP(t, sim.Options{Seed: 5, Preset: "agent", Model: "sim", MinTurns: 2, MaxTurns: 4})
	cfg := simAgent(t, "source.limit=3", "repeat.n=2", "generate.endpoints=["+url+"]", "env.max_seq_len=4", "groups.keep=all", "run.max_error_rate=1")
	sum, err := run(t, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrNothingGenerated) || !strings.Contains(err.Error(), generate.ClassPromptTooLong) {
		t.Fatalf("err %v", err)
	}
	rows := allRows(t, cfg.Output.Dir)
	if len(rows) != 6 || sum.ErrorClasses[generate.ClassPromptTooLong] != 6 {
		t.Fatalf("%d rows, summary %+v", len(rows), sum)
	}
	noEmptyOK(t, rows)
}

// TestValidatePredictsEmptyRuns: validate says which rows would fail
// before generating a token (the server's context, max_seq_len) and that
// the run would generate nothing.
func TestValidatePredictsEmptyRuns(t *testing.T) {
	url := simHTTP(t, sim.Options{Seed: 3, Preset: "short", Model: "sim-math", MaxModelLen: 512})
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"context", []string{"generate.params.max_tokens=512"}, "over the server's context (max_model_len 512): the server would refuse it, the row would fail (context_length)"},
		{"max_seq_len", []string{"env.max_seq_len=8"}, "max_seq_len 8 leaves no room to generate: the row would fail (prompt_too_long)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quickstart(t, append([]string{"generate.endpoints=[" + url + "]"}, tc.sets...)...)
			var out strings.Builder
			err := runner.Validate(context.Background(), cfg, runner.ValidateOptions{Rows: 2, Out: &out})
			if err == nil || !strings.Contains(err.Error(), "the run would generate nothing") || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("err %v\n%s", err, out.String())
			}
		})
	}
	// Within the context: no prediction, no problem.
	cfg := quickstart(t, "generate.endpoints=["+url+"]", "generate.params.max_tokens=256")
	var out strings.Builder
	if err := runner.Validate(context.Background(), cfg, runner.ValidateOptions{Rows: 2, Out: &out}); err != nil || strings.Contains(out.String(), "would fail") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
}

// TestGroupOverRecordLimit: with the record batch's text limit lowered,
// the groups that fit are committed whole (records cut by bytes), and a
// group holding more text than a record can is failed (too_large) into
// errors/ with its texts cut, without a panic.
func TestGroupOverRecordLimit(t *testing.T) {
	cfg := quickstart(t, "source.limit=40", "run.max_error_rate=1", "generate.params.max_tokens=4096", "generate.sim.preset=reasoning")
	// Measure a group: the limit sits between the smaller and the larger.
	probe := quickstart(t, "source.limit=40", "generate.params.max_tokens=4096", "generate.sim.preset=reasoning")
	if _, err := run(t, probe, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	byGroup := map[int64]int64{}
	for _, r := range allRows(t, probe.Output.Dir) {
		byGroup[r.Task.Index] += collate.RowBytes(r)
	}
	sizes := slices.Sorted(maps.Values(byGroup))
	limit := sizes[len(sizes)/2]
	t.Logf("group sizes %v", sizes)
	defer runner.SetMaxRecordBytes(limit)()
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := readBack(t, cfg.Output.Dir, schema.DataDir)
	errs := readBack(t, cfg.Output.Dir, schema.ErrorsDir)
	if len(data) == 0 || len(errs) == 0 || len(data)+len(errs) != 160 {
		t.Fatalf("%d data rows, %d error rows (limit %d of sizes %v)", len(data), len(errs), limit, sizes)
	}
	for _, r := range errs {
		if r.ErrorClass != runner.ClassTooLarge || !strings.Contains(r.Error, "more than one record batch can") {
			t.Fatalf("%s: %s %s", r, r.ErrorClass, r.Error)
		}
		for _, m := range r.Messages {
			if len(m.Content) > 1<<10 {
				t.Fatalf("%s: a message of %d bytes kept", r, len(m.Content))
			}
		}
	}
	if sum.ErrorClasses[runner.ClassTooLarge] != len(errs) || sum.Errors != int64(len(errs)) || sum.OK != int64(len(data)) {
		t.Fatalf("summary %+v, %d error rows", sum, len(errs))
	}
	failures, _ := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.FailuresFile))
	if strings.Count(string(failures), runner.ClassTooLarge) != len(errs) {
		t.Fatalf("failures.jsonl:\n%s", failures)
	}
}

// TestCancelledTokensAccounted: a dynamic-sampling run that cancels what
// is in flight at its target reports the requests it cancelled and an
// estimate of their partial output; with it, its token figures account
// for the server's own generation-token counter (trajflow sim-server's
// vllm:generation_tokens_total) within 2%.
func TestCancelledTokensAccounted(t *testing.T) {
	s := sim.New(sim.Options{Seed: 1, Preset: "agent", Accuracy: 0.5, Model: "sim-math", TimeScale: 0.05})
	srv := httptest.NewServer(s.Handler())
	defer func() { srv.Close(); s.Close() }()
	cfg := quickstart(t, "generate.endpoints=["+srv.URL+"/v1]", "generate.concurrency=64", "generate.params.max_tokens=1024",
		"groups.keep=nonzero_std", "groups.target=64", "groups.on_target=cancel")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.CancelledRequests == 0 || sum.CancelledTokensEstimate == 0 {
		t.Fatalf("no request cancelled in flight: %+v", sum)
	}
	if sum.ServerTokens <= 0 {
		t.Fatalf("the server's count is unknown: %d", sum.ServerTokens)
	}
	ours := sum.CompletionTokens + sum.CancelledTokensEstimate
	off := math.Abs(float64(ours-sum.ServerTokens)) / float64(sum.ServerTokens)
	t.Logf("answered %d + cancelled ~%d (%d requests) = %d; server %d; off %.2f%% (answered alone %.2f%%)",
		sum.CompletionTokens, sum.CancelledTokensEstimate, sum.CancelledRequests, ours, sum.ServerTokens, 100*off,
		100*math.Abs(float64(sum.CompletionTokens-sum.ServerTokens))/float64(sum.ServerTokens))
	// The estimate is the cancelled requests' time in flight at the
	// decode rate seen, so CPU load on the test machine moves it (2.4%
	// seen on a loaded 2-core machine, under 1% when quiet): within 5%,
	// and always closer than the answered tokens alone.
	if alone := math.Abs(float64(sum.CompletionTokens-sum.ServerTokens)) / float64(sum.ServerTokens); off > 0.05 || off >= alone {
		t.Errorf("the token figures are %.1f%% off the server's count (answered tokens alone %.1f%%)", 100*off, 100*alone)
	}
	var m struct {
		LastRun struct {
			CompletionTokens        int64  `json:"completion_tokens"`
			CancelledRequests       int64  `json:"cancelled_requests"`
			CancelledTokensEstimate int64  `json:"cancelled_tokens_estimate"`
			ServerTokens            *int64 `json:"server_tokens"`
		} `json:"last_run"`
	}
	b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if lr := m.LastRun; lr.CancelledRequests != sum.CancelledRequests || lr.CancelledTokensEstimate != sum.CancelledTokensEstimate ||
		lr.CompletionTokens != sum.CompletionTokens || lr.ServerTokens == nil || *lr.ServerTokens != sum.ServerTokens {
		t.Errorf("metrics.json last_run %+v, summary %+v", lr, sum)
	}
	for _, want := range []string{"requests cancelled in flight: ", "the servers' own count of tokens generated during the run: "} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, sum)
		}
	}
}

// A named pipe as the source: a stop while the run waits for its writer
// ends the wait; a resume, which would read the pipe twice, is refused at
// once rather than hanging.
func TestFIFOSource(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "tasks.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	root, _ := filepath.Abs("..")
	data, err := os.ReadFile(filepath.Join(root, "examples/quickstart/tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cfg := quickstart(t, "source.path="+fifo, "output.dir="+out, "source.limit=5")

	// No writer: a cancel ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	if _, err := runner.Run(ctx, cfg, runner.Options{}); !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}

	// The abandoned open still waits: a writer that closes at once ends
	// it, so that it takes nothing from the runs below.
	if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
	time.Sleep(100 * time.Millisecond)

	write := func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write(data)
	}
	go write()
	cfg = quickstart(t, "source.path="+fifo, "output.dir="+out, "source.limit=5")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	// The resume: refused, naming the pipe, without waiting for a writer.
	go write()
	cfg = quickstart(t, "source.path="+fifo, "output.dir="+out, "source.limit=5")
	done := make(chan error, 1)
	go func() { _, err := runner.Run(context.Background(), cfg, runner.Options{}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "is not a regular file (a named pipe)") {
			t.Fatalf("resume: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the resume hangs")
	}
}
