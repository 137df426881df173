//go:build unix

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// defaultConfig writes a config with every output and run key at its
// default (file_rows 100000: no file would be committed before the end),
// on the given endpoint, and returns its path.
func defaultConfig(t *testing.T, dir, name, tasks, out, endpoint string, timeScale float64) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: e2e, progress: 0}
source: {path: %s}
prompt: {system: "You are a careful mathematician.", user: "Solve: {question}"}
repeat: {n: 4, seed: 1234}
generate:
  endpoints: [%s]
  model: sim-math
  params: {temperature: 1.0, max_tokens: 256}
  sim: {seed: 7, accuracy: 0.6, time_scale: %g}
env: {name: math, answer_field: expected_answer}
output: {dir: %s}
`, q(tasks), q(endpoint), timeScale, q(out))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSIGTERMCommitsFinishedGroups: SIGTERM mid-run with the default
// settings (no file committed yet) commits every finished group, writes
// metrics.json and exits 130; the rerun completes the data with every
// rollout exactly once, read back by Arrow's reader.
func TestSIGTERMCommitsFinishedGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated run of a few seconds (skipped under -short)")
	}
	const tasks, n = 700, 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := defaultConfig(t, dir, "config.yaml", writeTasks(t, dir, tasks, 5), out, "sim://", 0.05)
	data := filepath.Join(out, "data")

	cmd := exec.Command(binary, "run", cfg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond)
	if len(parts(t, data)) > 0 {
		t.Fatal("a file was committed before the signal; the test needs file_rows not to rotate")
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	took := time.Since(sent)
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d after SIGTERM, want 130:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopping: interrupted (signal terminated)") {
		t.Errorf("stderr does not say why it stopped:\n%s", stderr.String())
	}
	partial := readDataset(t, data)
	if len(partial.rows) == 0 || len(partial.rows) >= tasks*n {
		t.Fatalf("SIGTERM committed %d rows of %d:\n%s", len(partial.rows), tasks*n, stdout.String())
	}
	if want := fmt.Sprintf("rows written: %d,", len(partial.rows)); !strings.Contains(stdout.String(), want) {
		t.Errorf("summary does not say %q:\n%s", want, stdout.String())
	}
	if _, err := os.Stat(filepath.Join(out, "metrics.json")); err != nil {
		t.Fatalf("metrics.json after SIGTERM: %v", err)
	}
	t.Logf("SIGTERM: exit 130 after %s, %d rows committed in %d files", took.Round(time.Millisecond), len(partial.rows), len(parts(t, data)))

	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("rerun exited %d:\n%s", res.code, res.stderr)
	}
	final := readDataset(t, data) // fails on a key committed twice
	if len(final.rows) != tasks*n {
		t.Fatalf("after the rerun: %d rows, want %d", len(final.rows), tasks*n)
	}
	for k, r := range partial.rows {
		if g := final.rows[k]; g == nil || g.Reward != r.Reward {
			t.Errorf("row %+v committed before SIGTERM changed on the rerun", k)
		}
	}
}

// simServer starts `trajflow sim-server` with args on a free port and
// returns its base URL; the process ends with the test.
func simServer(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binary, append([]string{"sim-server", "--addr", "127.0.0.1:0", "--model", "sim-math", "--seed", "7", "--accuracy", "0.6", "--time-scale", "0"}, args...)...)
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("sim-server: %v", err)
	}
	go io.Copy(io.Discard, pr)
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "sim-server listening on ")
	if !ok {
		t.Fatalf("sim-server said %q", line)
	}
	return url
}

// TestUnauthorizedServerFailsFast: a server answering 401 to every
// completion makes the run exit 4 within seconds, naming the cause; after
// the fix (a server that answers) the rerun commits every rollout ok,
// each exactly once.
func TestUnauthorizedServerFailsFast(t *testing.T) {
	const tasks, n = 200, 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	taskFile := writeTasks(t, dir, tasks, 9)
	cfg := defaultConfig(t, dir, "config.yaml", taskFile, out, simServer(t, "--fail", "401=1"), 0)

	start := time.Now()
	res := run(t, "run", cfg)
	took := time.Since(start)
	if res.code != 4 || !strings.Contains(res.stderr, "circuit breaker open") || !strings.Contains(res.stderr, "HTTP 401") {
		t.Fatalf("401 server: exit %d, want 4 naming the breaker and the 401:\n%s", res.code, res.stderr)
	}
	if took > 10*time.Second {
		t.Fatalf("the run took %s to stop", took)
	}
	t.Logf("401 server: exit 4 after %s: %s", took.Round(time.Millisecond), firstLine(res.stderr, "circuit breaker"))

	fixed := simServer(t)
	res = run(t, "run", cfg, "--set", "generate.endpoints=["+fixed+"]")
	if res.code != 0 {
		t.Fatalf("rerun after the fix exited %d:\n%s", res.code, res.stderr)
	}
	final := readDataset(t, filepath.Join(out, "data"))
	if len(final.rows) != tasks*n {
		t.Fatalf("after the fix: %d rows, want %d", len(final.rows), tasks*n)
	}
	for k, r := range final.rows {
		if r.Status != pipeline.StatusOK {
			t.Fatalf("%+v: status %s", k, r.Status)
		}
	}
}

// TestFaultyServerProcess: a sim-server process injecting faults into 30%
// of requests; the run exits 0, every rollout is in data/ or errors/
// exactly once, and a rerun redoes the failed groups.
func TestFaultyServerProcess(t *testing.T) {
	const tasks, n = 150, 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	srv := simServer(t, "--fail", "429=0.08,500=0.06,503=0.04,reset=0.04,malformed=0.04,truncate=0.02,stall=0.02,stall_for=50ms,retry_after=10ms")
	cfg := defaultConfig(t, dir, "config.yaml", writeTasks(t, dir, tasks, 3), out, srv, 0)
	sets := []string{"--set", "generate.backoff_base=1ms", "--set", "generate.backoff_max=5ms", "--set", "generate.max_attempts=3"}
	res := run(t, append([]string{"run", cfg}, sets...)...)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s%s", res.code, res.stdout, res.stderr)
	}
	data := readDataset(t, filepath.Join(out, "data"))
	errs := map[pipeline.Key]bool{}
	if _, err := os.Stat(filepath.Join(out, "errors")); err == nil {
		for k := range readDataset(t, filepath.Join(out, "errors")).rows {
			if data.rows[k] != nil {
				t.Fatalf("%+v in data/ and errors/", k)
			}
			errs[k] = true
		}
	}
	if len(data.rows)+len(errs) != tasks*n {
		t.Fatalf("%d rows in data/ + %d in errors/, want %d", len(data.rows), len(errs), tasks*n)
	}
	t.Logf("30%% faults: %d rows ok in data/, %d in errors/ (groups with a failed member)\n%s", len(data.rows), len(errs), res.stdout)
	res = run(t, append([]string{"run", cfg}, sets...)...)
	if res.code != 0 {
		t.Fatalf("rerun exit %d:\n%s", res.code, res.stderr)
	}
	if got := len(readDataset(t, filepath.Join(out, "data")).rows); got <= len(data.rows) && len(errs) > 0 {
		t.Fatalf("the rerun redid no failed group: %d rows in data/", got)
	}
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
