package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/schema"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
)

// binary is the path of the trajflow binary TestMain built.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "trajflow-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: repository root not found:", err)
		return 1
	}
	gobin := filepath.Join(goroot(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: no go command to build trajflow:", err)
			return 1
		}
	}
	binary = filepath.Join(dir, "trajflow")
	build := exec.Command(gobin, "build", "-o", binary, "./cmd/trajflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/trajflow: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// goroot is the GOROOT of the go command running the tests.
func goroot() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// writeTasks writes n arithmetic tasks (the quick start's shape) to a JSONL
// file in dir and returns its path.
func writeTasks(t *testing.T, dir string, n int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range n {
		a, b := rng.IntN(90)+10, rng.IntN(90)+10
		row := map[string]string{
			"id":              fmt.Sprintf("t-%05d", i),
			"question":        fmt.Sprintf("What is %d + %d?", a, b),
			"expected_answer": fmt.Sprint(a + b),
		}
		if err := enc.Encode(row); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runConfig is what varies between the configs the tests write.
type runConfig struct {
	tasks     string  // task file
	out       string  // output.dir
	n         int     // repeat.n
	timeScale float64 // generate.sim.time_scale
	fileRows  int     // output.file_rows
	batchRows int     // output.batch_rows
	steps     bool    // output.steps
}

// writeConfig writes a run config to dir/name and returns its path. run.id
// is fixed so that runs into different directories produce the same rows.
func writeConfig(t *testing.T, dir, name string, c runConfig) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: e2e, progress: 0}
source: {path: %s}
prompt: {system: "You are a careful mathematician.", user: "Solve: {question}"}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 64
  params: {temperature: 1.0, max_tokens: 256}
  sim: {seed: 7, accuracy: 0.6, time_scale: %g}
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %s, file_rows: %d, batch_rows: %d, steps: %v}
`, q(c.tasks), c.n, c.timeScale, q(c.out), c.fileRows, c.batchRows, c.steps)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is a finished child process.
type result struct {
	code           int // exit code; -1 when a signal ended it
	stdout, stderr string
}

// run runs trajflow to completion with args and returns its result.
func run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("trajflow %s: %v", strings.Join(args, " "), err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// parts lists the committed part files of a directory, sorted.
func parts(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// dataset is every row of a directory's committed files, by key.
type dataset struct {
	rows  map[pipeline.Key]*pipeline.Rollout
	files map[pipeline.Key]string // the file each row came from
	fps   map[string]bool         // config fingerprints in the files' metadata
}

// readDataset reads every committed part file of dir with Arrow's own
// Parquet reader (all columns) into rollouts, through a checked allocator
// that must end at zero bytes. It fails the test on a duplicate key, on a
// file that does not hold whole groups, or on a schema that is not the
// output schema.
func readDataset(t *testing.T, dir string) dataset {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	ds := dataset{
		rows:  map[pipeline.Key]*pipeline.Rollout{},
		files: map[pipeline.Key]string{},
		fps:   map[string]bool{},
	}
	for _, path := range parts(t, dir) {
		rs, fp := readFile(t, path, alloc)
		ds.fps[fp] = true
		groups := map[pipeline.GroupKey]int{}
		for _, r := range rs {
			k := r.Key()
			if prev, dup := ds.files[k]; dup {
				t.Errorf("key %+v is in %s and in %s", k, prev, path)
				continue
			}
			ds.rows[k], ds.files[k] = r, path
			groups[pipeline.GroupKey{TaskIndex: k.TaskIndex, Attempt: k.Attempt}]++
		}
		for g, n := range groups {
			if want := rs[0].GroupSize; n != want {
				t.Errorf("%s: group %+v has %d of its %d rows in this file", path, g, n, want)
			}
		}
	}
	alloc.AssertSize(t, 0)
	return ds
}

// readFile reads one Parquet file, all columns, and decodes its rows. It
// returns them with the file's config fingerprint.
func readFile(t *testing.T, path string, alloc memory.Allocator) ([]*pipeline.Rollout, string) {
	t.Helper()
	f, err := file.OpenParquetFile(path, false, file.WithReadProps(parquet.NewReaderProperties(alloc)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	fp := ""
	if v := f.MetaData().KeyValueMetadata().FindValue(schema.KeyConfigFingerprint); v != nil {
		fp = *v
	}
	fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, alloc)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer tbl.Release()
	if err := schema.Check(tbl.Schema()); err != nil {
		t.Fatalf("%s: schema read back: %v", path, err)
	}
	if tbl.NumRows() == 0 {
		t.Fatalf("%s: committed file has no rows", path)
	}
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	var out []*pipeline.Rollout
	for tr.Next() {
		rs, err := schema.Rollouts(tr.Record())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, rs...)
	}
	if int64(len(out)) != tbl.NumRows() {
		t.Fatalf("%s: decoded %d rows of %d", path, len(out), tbl.NumRows())
	}
	return out, fp
}

// deterministic is a rollout with its wall-clock fields cleared: what the
// simulator decides from the seeds alone.
func deterministic(r *pipeline.Rollout) pipeline.Rollout {
	c := *r
	c.GenTime, c.EnvTime, c.TotalTime, c.Started = 0, 0, 0, time.Time{}
	return c
}

// nopAlloc reads files whose allocations the test does not check.
var nopAlloc = memory.NewGoAllocator()

// interruptAfterFirstCommit starts cmd, a trajflow run, sends it SIGINT once
// a part file is committed in data, and waits for it to exit; it returns
// what the run wrote on stderr.
func interruptAfterFirstCommit(t *testing.T, cmd *exec.Cmd, data string) *bytes.Buffer {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(time.Minute)
	for len(parts(t, data)) == 0 {
		select {
		case <-exited:
			t.Fatalf("run ended (exit %d) before its first commit:\n%s", cmd.ProcessState.ExitCode(), stderr.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("no commit within a minute:\n%s", stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-exited
	return &stderr
}
