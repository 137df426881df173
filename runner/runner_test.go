package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/trajflow/trajflow/envs/builtin" // the environments the tests run
	"github.com/trajflow/trajflow/readback"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/config"
	mathenv "github.com/trajflow/trajflow/envs/math"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// quickstart is the quick start's config, rooted at the repository.
func quickstart(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("..")
	sets = append([]string{
		"source.path=" + filepath.Join(root, "examples/quickstart/tasks.jsonl"),
		"output.dir=" + t.TempDir(),
		"run.progress=0",
	}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/quickstart/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func run(t *testing.T, cfg *config.Config, opts runner.Options) (*runner.Summary, error) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	opts.Alloc = alloc
	sum, err := runner.Run(context.Background(), cfg, opts)
	if n := alloc.CurrentAlloc(); n != 0 {
		t.Errorf("%d Arrow bytes left allocated after the run", n)
	}
	return sum, err
}

// readBack reads every part file of dir/sub with Arrow's own Parquet reader
// (not the writer's library) and decodes the rows.
func readBack(t *testing.T, dir, sub string) []*pipeline.Rollout {
	t.Helper()
	rs, err := readback.Dir(filepath.Join(dir, sub))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func keys(rs []*pipeline.Rollout) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, fmt.Sprintf("%d/%d/%d", r.Task.Index, r.Attempt, r.RolloutIndex))
	}
	slices.Sort(ks)
	return ks
}

func TestQuickstartEndToEnd(t *testing.T) {
	defer leak.Check(t)()
	cfg := quickstart(t, "source.limit=50", "output.batch_rows=24", "output.file_rows=60")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if len(rows) != 200 || sum.Rows != 200 || sum.OK != 200 || sum.Dispatched != 200 {
		t.Fatalf("read %d rows; summary %+v", len(rows), sum)
	}
	ks := keys(rows)
	if len(slices.Compact(slices.Clone(ks))) != len(ks) {
		t.Fatal("(task_index, attempt, rollout_index) is not unique")
	}
	// Rewards, recomputed from what the output says the model answered.
	var total float64
	for _, r := range rows {
		var task map[string]any
		if err := json.Unmarshal(r.Task.Raw, &task); err != nil {
			t.Fatal(err)
		}
		last := r.Messages[len(r.Messages)-1]
		got, _ := mathenv.ExtractAnswer(last.Content)
		want := 0.0
		if mathenv.Equal(got, task["expected_answer"].(string)) {
			want = 1
		}
		if last.Role != "assistant" || r.Reward != want || r.Metrics["acc"] != want {
			t.Fatalf("%s: reward %g, answer %q vs %v", r, r.Reward, got, task["expected_answer"])
		}
		if r.Status != pipeline.StatusOK || !r.Terminated || r.NumTurns != 1 || r.RunID != cfg.Run.ID || r.Model != "sim-math" {
			t.Fatalf("%s: %+v", r, r)
		}
		if len(r.ResponseTokenIDs) == 0 || len(r.LossMask) != len(r.ResponseTokenIDs) || len(r.PromptTokenIDs) == 0 {
			t.Fatalf("%s: token view missing", r)
		}
		total += r.Reward
	}
	if mean := total / 200; mean != sum.MeanReward {
		t.Fatalf("mean reward %g, summary says %g", mean, sum.MeanReward)
	}
	// Whole groups per file: every file holds all 4 rollouts of its tasks.
	paths, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, "part-*.parquet"))
	if len(paths) < 3 {
		t.Fatalf("%d files; want rotation", len(paths))
	}
}

// recorder keeps the token ids the server sent, by request seed.
type recorder struct {
	mu  sync.Mutex
	ids map[float64][]int32
	h   http.Handler
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Seed float64 `json:"seed"`
	}
	json.Unmarshal(body, &req)
	cw := &capture{ResponseWriter: w}
	rec.h.ServeHTTP(cw, r)
	var resp struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if json.Unmarshal(cw.buf.Bytes(), &resp) == nil && len(resp.Choices) == 1 {
		rec.mu.Lock()
		rec.ids[req.Seed] = resp.Choices[0].TokenIDs
		rec.mu.Unlock()
	}
}

type capture struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (c *capture) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}

func TestGenerateOverHTTP(t *testing.T) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 3, Preset: "short", Accuracy: 0.5, Model: "sim-math"})
	defer s.Close()
	rec := &recorder{ids: map[float64][]int32{}, h: s.Handler()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cfg := quickstart(t, "source.limit=20", "repeat.seed_mode=hash",
		"generate.endpoints=["+srv.URL+"/v1]", "generate.params.logprobs=true", "generate.params.return_token_ids=true")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close() // waits for the handlers, so every response is recorded
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if len(rows) != 80 || sum.OK != 80 {
		t.Fatalf("%d rows, summary %+v", len(rows), sum)
	}
	for _, r := range rows {
		sent := rec.ids[float64(r.Seed)]
		if len(sent) == 0 || !slices.Equal(r.ResponseTokenIDs, sent) {
			t.Fatalf("%s: output ids %v, server sent %v", r, r.ResponseTokenIDs, sent)
		}
		if len(r.ResponseLogprobs) != len(sent) {
			t.Fatalf("%s: %d logprobs for %d tokens", r, len(r.ResponseLogprobs), len(sent))
		}
		// Schema v2 stores the ids once; a message gets them back from
		// its span, when the generate stage recorded one.
		if last := r.Messages[len(r.Messages)-1]; last.TokenEnd > last.TokenStart && !slices.Equal(last.TokenIDs, sent) {
			t.Fatalf("%s: last message's span [%d, %d) holds %v, server sent %v", r, last.TokenStart, last.TokenEnd, last.TokenIDs, sent)
		}
	}
}

func TestBadRows(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"question": "What is 1 + 1?", "expected_answer": "2"}
{"question": "What is 2 + 2?", "expected_answer": "4"
{"expected_answer": "6"}
{"question": "What is 3 + 4?", "expected_answer": "7"}
`), 0o644)
	t.Run("error", func(t *testing.T) {
		cfg := quickstart(t, "source.path="+tasks)
		_, err := run(t, cfg, runner.Options{})
		if err == nil || !strings.Contains(err.Error(), "tasks.jsonl:2") {
			t.Fatalf("got %v, want an error naming tasks.jsonl:2", err)
		}
	})
	t.Run("skip", func(t *testing.T) {
		cfg := quickstart(t, "source.path="+tasks, "source.on_bad_row=skip")
		sum, err := run(t, cfg, runner.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Rejected != 2 || sum.Rows != 8 {
			t.Fatalf("summary %+v", sum)
		}
		b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.RejectsFile))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "tasks.jsonl:2") || !strings.Contains(lines[1], `row has no field \"question\"`) {
			t.Fatalf("rejects:\n%s", b)
		}
	})
}

func TestResumeRedoesOnlyUncommittedWork(t *testing.T) {
	defer leak.Check(t)()
	clean := quickstart(t, "source.limit=60", "output.batch_rows=8", "output.file_rows=8")
	if _, err := run(t, clean, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	want := readBack(t, clean.Output.Dir, schema.DataDir)

	// A run whose last files never got committed: drop them.
	cfg := quickstart(t, "source.limit=60", "output.batch_rows=8", "output.file_rows=8")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	paths, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, "part-*.parquet"))
	for _, p := range paths[len(paths)/2:] {
		os.Remove(p)
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resumed == 0 || sum.Tasks != 60 || sum.Rows >= int64(len(want)) {
		t.Fatalf("summary %+v", sum)
	}
	got := readBack(t, cfg.Output.Dir, schema.DataDir)
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("resumed keys differ from a clean run's: %d vs %d rows", len(got), len(want))
	}
	rewards := map[string]float64{}
	for _, r := range want {
		rewards[fmt.Sprint(r.Task.Index, r.RolloutIndex)] = r.Reward
	}
	for _, r := range got {
		if rewards[fmt.Sprint(r.Task.Index, r.RolloutIndex)] != r.Reward {
			t.Fatalf("%s: reward differs from the clean run's", r)
		}
	}

	// A changed semantic key is refused, naming it.
	changed := quickstart(t, "source.limit=60", "repeat.n=5", "output.dir="+cfg.Output.Dir)
	_, err = run(t, changed, runner.Options{})
	if !errors.Is(err, runner.ErrConfigChanged) || !strings.Contains(err.Error(), "repeat.n: 4 → 5") {
		t.Fatalf("got %v", err)
	}
}

func TestDynamicSamplingStopsAtTarget(t *testing.T) {
	defer leak.Check(t)()
	for _, onTarget := range []string{"cancel", "drain"} {
		t.Run(onTarget, func(t *testing.T) {
			cfg := quickstart(t, "repeat.n=8", "groups.keep=nonzero_std", "groups.target=64", "groups.on_target="+onTarget,
				"generate.sim.keep=0.5", "output.filtered=true")
			sum, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			groups := map[int64][]float64{}
			for _, r := range rows {
				groups[r.Task.Index] = append(groups[r.Task.Index], r.Reward)
				if !r.Kept || r.GroupRewardStd == 0 {
					t.Fatalf("%s: kept %v std %g", r, r.Kept, r.GroupRewardStd)
				}
			}
			if len(groups) != 64 || len(rows) != 64*8 || sum.Kept != 64 {
				t.Fatalf("%d groups, %d rows, summary %+v", len(groups), len(rows), sum)
			}
			for task, rw := range groups {
				if slices.Min(rw) == slices.Max(rw) {
					t.Fatalf("task %d: all rewards equal", task)
				}
			}
			// Every dispatched rollout is accounted for.
			if sum.OK+sum.Errors+sum.Cancelled+sum.Filtered != sum.Dispatched {
				t.Fatalf("accounting: %+v", sum)
			}
			if onTarget == "drain" {
				if _, err := os.Stat(filepath.Join(cfg.Output.Dir, schema.SurplusDir)); err != nil && sum.Dropped["over_target"] > 0 {
					t.Fatalf("surplus groups but no surplus dir: %v", err)
				}
			}
		})
	}
}

// TestRerunAfterTargetReached: rerunning a run that reached its target
// ends at once with success, reads no task, commits nothing more and says
// the target was reached by earlier runs, in either group order. (A stop
// would end a run that waits: the 30s context makes a wait an error.)
func TestRerunAfterTargetReached(t *testing.T) {
	for _, order := range []string{"completion", "task"} {
		t.Run(order, func(t *testing.T) {
			cfg := quickstart(t, "groups.keep=nonzero_std", "groups.target=20", "groups.order="+order, "generate.sim.keep=0.5")
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			before := keys(readBack(t, cfg.Output.Dir, schema.DataDir))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sum, err := runner.Run(ctx, cfg, runner.Options{})
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if sum.Tasks != 0 || sum.Dispatched != 0 || sum.EarlierKept != 20 || len(sum.Files) != 0 {
				t.Fatalf("rerun did work: %+v", sum)
			}
			if want := "target: already reached by earlier runs (20 kept groups committed, target 20); nothing to do"; !strings.Contains(sum.String(), want) {
				t.Fatalf("summary lacks %q:\n%s", want, sum)
			}
			if after := keys(readBack(t, cfg.Output.Dir, schema.DataDir)); !slices.Equal(before, after) {
				t.Fatalf("rerun changed the data: %d rows before, %d after", len(before), len(after))
			}
		})
	}
}

func TestDataRunsOutBeforeTarget(t *testing.T) {
	cfg := quickstart(t, "source.limit=10", "groups.keep=nonzero_std", "groups.target=500", "generate.sim.keep=0.5")
	sum, err := run(t, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrShortOfData) {
		t.Fatalf("got %v", err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if sum.Kept == 0 || len(rows) != sum.Kept*4 || !strings.Contains(err.Error(), fmt.Sprintf("kept %d of 500", sum.Kept)) {
		t.Fatalf("kept %d, %d rows, %v", sum.Kept, len(rows), err)
	}
}

func TestResampleDroppedTasks(t *testing.T) {
	cfg := quickstart(t, "source.limit=30", "groups.keep=nonzero_std", "groups.max_attempts=3", "generate.sim.keep=0.5", "output.filtered=true")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kept := readBack(t, cfg.Output.Dir, schema.DataDir)
	dropped := readBack(t, cfg.Output.Dir, schema.FilteredDir)
	attempts := map[int64]int{}
	for _, r := range append(kept, dropped...) {
		attempts[r.Task.Index] = max(attempts[r.Task.Index], r.Attempt)
	}
	var again int
	for _, r := range dropped {
		if r.FilterReason != "zero_std" || r.Status != pipeline.StatusFiltered {
			t.Fatalf("%s: reason %q status %s", r, r.FilterReason, r.Status)
		}
		if r.Attempt > 0 {
			again++
		}
	}
	for _, r := range kept {
		if r.Attempt > 0 {
			again++
		}
	}
	if again == 0 || sum.Groups != (len(kept)+len(dropped))/4 {
		t.Fatalf("no task was sampled again; summary %+v", sum)
	}
	for task, a := range attempts {
		if a > 2 {
			t.Fatalf("task %d sampled %d times", task, a+1)
		}
	}
}

func TestInterruptedRunLeavesNothingRunning(t *testing.T) {
	defer leak.Check(t)()
	cfg := quickstart(t, "generate.sim.time_scale=1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := runner.Run(ctx, cfg, runner.Options{})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestFileRotationByBytes(t *testing.T) {
	cfg := quickstart(t, "source.limit=40", "output.batch_rows=8", "output.file_bytes=20000", "output.row_group_rows=16")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Files) < 3 {
		t.Fatalf("%d files; file_bytes should rotate", len(sum.Files))
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	if len(rows) != 160 {
		t.Fatalf("%d rows", len(rows))
	}
}

func TestOneRunPerOutputDirectory(t *testing.T) {
	defer leak.Check(t)()
	cfg := quickstart(t, "generate.sim.time_scale=1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, cfg, runner.Options{})
		done <- err
	}()
	lock := filepath.Join(cfg.Output.Dir, schema.LockFile)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(lock); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run took no lock")
		}
	}
	// Its own config: Run sets the config's secret key, and the first run
	// is reading it.
	second := quickstart(t, "generate.sim.time_scale=1", "output.dir="+cfg.Output.Dir)
	_, err := runner.Run(context.Background(), second, runner.Options{})
	if err == nil || !strings.Contains(err.Error(), "in use by another trajflow run (pid ") {
		t.Fatalf("second run: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v", err)
	}
	// Once the first run is gone, the directory is free again.
	if _, err := run(t, quickstart(t, "source.limit=2", "output.dir="+cfg.Output.Dir), runner.Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestStaleTempFilesRemoved(t *testing.T) {
	cfg := quickstart(t, "source.limit=4")
	var stale []string
	for _, dest := range []string{schema.DataDir, schema.FilteredDir, schema.SurplusDir} {
		os.MkdirAll(filepath.Join(cfg.Output.Dir, dest), 0o755)
		p := filepath.Join(cfg.Output.Dir, dest, ".part-00007.parquet.tmp")
		os.WriteFile(p, []byte("half a file"), 0o644)
		stale = append(stale, p)
	}
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s is still there", p)
		}
	}
}

// A directory holding part files of schema version 1 (written by an
// earlier trajflow) is not resumed: the run would mix two schemas in one
// dataset. The error names the file and its version; nothing is written.
func TestResumeRefusesV1(t *testing.T) {
	v1, err := os.ReadFile("../testdata/schema-v1/part-00000.parquet")
	if err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{schema.DataDir, schema.FilteredDir, schema.SurplusDir} {
		t.Run(dest, func(t *testing.T) {
			cfg := quickstart(t, "source.limit=8")
			path := filepath.Join(cfg.Output.Dir, dest, "part-00000.parquet")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, v1, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := run(t, cfg, runner.Options{AllowConfigChange: true})
			want := path + " has schema version 1, this trajflow writes version " + schema.Version
			if !errors.Is(err, runner.ErrSchemaVersion) || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error with %q", err, want)
			}
			for _, d := range []string{schema.DataDir, schema.FilteredDir, schema.SurplusDir} {
				files, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, d, "*.parquet"))
				if d == dest && len(files) == 1 {
					continue
				}
				if len(files) > 0 {
					t.Errorf("%s: %v written", d, files)
				}
			}
		})
	}
}

// The summary names metrics.json only when the run left one on disk.
func TestSummaryNamesMetricsOnlyWhenWritten(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"question": "What is 1 + 1?"`+"\n"), 0o644)
	sum, err := run(t, quickstart(t, "source.path="+bad), runner.Options{})
	if err == nil || sum == nil {
		t.Fatalf("summary %v, err %v: want both", sum, err)
	}
	if sum.Metrics != "" || !strings.Contains(sum.String(), "metrics: none (nothing committed to data/)") {
		t.Errorf("nothing committed, yet the summary names %q:\n%s", sum.Metrics, sum)
	}
	cfg := quickstart(t, "source.limit=4")
	sum, err = run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, serr := os.Stat(sum.Metrics); sum.Metrics == "" || serr != nil || !strings.Contains(sum.String(), "metrics: "+sum.Metrics) {
		t.Errorf("summary names %q (stat: %v):\n%s", sum.Metrics, serr, sum)
	}
}
