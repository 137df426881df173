package runner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

func TestFaultyServerEveryRolloutResolvesOnce(t *testing.T) {
	defer leak.Check(t)()
	var faults sim.Faults
	// 30 % of requests fail in total, in every way the simulator can.
	if err := sim.ParseFaults("429=0.08,500=0.06,503=0.04,reset=0.04,malformed=0.04,truncate=0.02,stall=0.02,stall_for=50ms,retry_after=10ms", &faults); err != nil {
		t.Fatal(err)
	}
	s := sim.New(sim.Options{Seed: 11, Preset: "short", Accuracy: 0.5, Faults: faults, Model: "sim-math"})
	defer s.Close()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()

	const attempts = 3
	cfg := quickstart(t, "source.limit=60", "generate.endpoints=["+srv.URL+"/v1]",
		"generate.max_attempts=3", "generate.backoff_base=1ms", "generate.backoff_max=5ms", "generate.timeout=20s",
		"groups.sample_retries=0")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Groups with a failed member go to errors/, the rest to data/: every
	// rollout is in exactly one of them.
	data := readBack(t, cfg.Output.Dir, schema.DataDir)
	rows := append(data, readBack(t, cfg.Output.Dir, schema.ErrorsDir)...)
	if len(rows) != 240 {
		t.Fatalf("%d rows, want 240", len(rows))
	}
	for _, r := range data {
		if r.Status != pipeline.StatusOK {
			t.Fatalf("%s in data/: status %s", r, r.Status)
		}
	}
	seen := map[string]bool{}
	var errs int
	for _, r := range rows {
		k := keys([]*pipeline.Rollout{r})[0]
		if seen[k] {
			t.Fatalf("%s written twice", k)
		}
		seen[k] = true
		switch r.Status {
		case pipeline.StatusOK, pipeline.StatusFiltered:
		case pipeline.StatusError:
			errs++
			if r.ErrorClass == "" || r.Error == "" {
				t.Fatalf("%s: error without class or message", r)
			}
		default:
			t.Fatalf("%s: status %s", r, r.Status)
		}
	}
	if int64(errs) != sum.Errors || sum.OK+sum.Errors+sum.Filtered != 240 {
		t.Fatalf("%d error rows; summary %+v", errs, sum)
	}
	if n := requests.Load(); n > 240*attempts || n <= 240 {
		t.Fatalf("%d requests for 240 rollouts at most %d attempts each", n, attempts)
	}
	// The failures file lists every errored rollout.
	b, _ := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.FailuresFile))
	if lines := strings.Count(string(b), "\n"); lines != errs {
		t.Fatalf("failures file has %d lines for %d errors", lines, errs)
	}
}

// TestSampleRetriesRecoverFailedRollouts: with 30% of requests failing,
// groups.sample_retries samples each failed rollout again until it
// succeeds. 12 retries: one of the 160 rollouts failing 13 times in a
// row has a chance of about 160·0.3^13 ≈ 3e-5 (with 6, 3.5%: a flaky
// test).
func TestSampleRetriesRecoverFailedRollouts(t *testing.T) {
	defer leak.Check(t)()
	s := sim.New(sim.Options{Seed: 11, Preset: "short", Faults: sim.Faults{Errors: map[int]float64{500: 0.3}}, Model: "sim-math"})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	cfg := quickstart(t, "source.limit=40", "generate.endpoints=["+srv.URL+"/v1]",
		"generate.max_attempts=1", "groups.sample_retries=12", "groups.keep=nonzero_std", "output.filtered=true")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var retried int
	for _, r := range append(readBack(t, cfg.Output.Dir, schema.DataDir), readBack(t, cfg.Output.Dir, schema.FilteredDir)...) {
		if r.Status == pipeline.StatusError {
			t.Fatalf("%s: still failed after %d retries", r, r.Retries)
		}
		if r.Retries > 0 {
			retried++
		}
	}
	if retried == 0 || sum.Dropped["error"] != 0 {
		t.Fatalf("retried %d, summary %+v", retried, sum)
	}
}

func TestSimServerCommandServesARun(t *testing.T) {
	defer leak.Check(t)()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- sim.Main(ctx, []string{"--addr", "127.0.0.1:0", "--seed", "5", "--model", "sim-math"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])
	cfg := quickstart(t, "source.limit=5", "generate.endpoints=["+url+"]")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil || sum.OK != 20 {
		t.Fatalf("%v; %+v", err, sum)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim-server did not stop")
	}
}

func TestInteropOutputs(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "rollouts.arrows")
	cfg := quickstart(t, "source.limit=10", "output.jsonl=true", "output.arrow_stream="+stream)
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	// NeMo Gym-shaped JSONL, one file per data part.
	parts, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.DataDir, schema.PartGlob))
	var n int
	for _, part := range parts {
		num, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(part), schema.PartPrefix+"-"), schema.PartExt))
		f, err := os.Open(filepath.Join(cfg.Output.Dir, schema.JSONLDir, schema.GymJSONLName(schema.DataDir, num)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"_ng_task_index", "_ng_rollout_index", "reward", "responses_create_params", "response"} {
				if _, ok := line[k]; !ok {
					t.Fatalf("line %d has no %s: %v", n, k, line)
				}
			}
			n++
		}
		f.Close()
	}
	if n != 40 {
		t.Fatalf("%d JSONL lines, want 40", n)
	}
	paths, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.JSONLDir, "*"))
	if len(paths) != len(parts) {
		t.Fatalf("jsonl files %v for parts %v", paths, parts)
	}
	// The Arrow IPC stream reads back with Arrow's reader.
	sf, err := os.Open(stream)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	rd, err := ipc.NewReader(sf, ipc.WithAllocator(memory.NewGoAllocator()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	var rows int64
	for rd.Next() {
		rows += rd.Record().NumRows()
	}
	if rows != 40 {
		t.Fatalf("%d rows in the Arrow stream", rows)
	}
	// A resumed run with nothing left to do commits no part, and so no
	// JSONL file.
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.JSONLDir, "*")); len(again) != len(paths) {
		t.Fatalf("jsonl files after resume: %v, before: %v", again, paths)
	}
}
