package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
)

// The power-cut trials: quick-start runs on a crashfs mount, each killed
// with SIGKILL at a random moment and followed by a power cut (every
// write not made durable dropped), then resumed.
const (
	cutTasks     = 300
	cutN         = 4
	cutPoints    = 50 // besides one after a finished run
	cutSeed      = 20261207
	cutTimeScale = 0.05
)

// TestPowerCutResume: after each cut, everything the run had reported
// committed (its progress lines' "rows committed", its summary's "rows
// written") is there and every part file reads back with trajflow's
// reader (readback), each key once, each part's output.jsonl file beside
// it with one line per row, inputs.jsonl holding every committed task,
// the secret key whole, and after a run that finished every row and
// metrics.json; the next run resumes from there. The last run of each directory
// finishes, and then every (task_index, rollout_index) is there exactly
// once and inputs.jsonl holds one line per task.
func TestPowerCutResume(t *testing.T) {
	if testing.Short() {
		t.Skip("power-cut trials: 50 simulated runs on a FUSE mount (skipped under -short)")
	}
	fsys := crashfstest.Mount(t)
	dir := t.TempDir()
	tasks := writeTasks(t, dir, cutTasks, 3)
	rng := rand.New(rand.NewPCG(cutSeed, 0))
	var tot trialTotals
	// A first run to its end times a whole run (the kills below strike
	// within parts of one), then a cut after its clean exit.
	calib := filepath.Join(fsys.Root(), "whole")
	calibCfg := writeCutConfig(t, dir, "whole.yaml", tasks, calib)
	start := time.Now()
	if _, ok := powerCut(t, fsys, calibCfg, calib, strike{delay: time.Hour}, "a finished run", &tot); !ok {
		t.FailNow()
	}
	whole := time.Since(start)
	checkWhole(t, calib)
	// Output directories one after the other: runs on one are cut until
	// one ends by itself (its dataset whole), then the next begins.
	d, out, cfg, c := -1, "", "", 0
	next := func() {
		d, c = d+1, 0
		out = filepath.Join(fsys.Root(), fmt.Sprintf("run%02d", d))
		cfg = writeCutConfig(t, dir, fmt.Sprintf("cut%02d.yaml", d), tasks, out)
	}
	next()
	for tot.cuts < cutPoints {
		// Every other cut strikes at a random moment of the run's first
		// part (the process's start, the resume's scan, the first
		// commits; now and then after the run's end), the others a random
		// moment after the run reported a random number of new rows
		// committed.
		st := strike{delay: time.Duration(rng.Float64() * 0.4 * float64(whole))}
		if left := cutTasks*cutN - countRows(t, out); c%2 == 1 && left > 1 {
			st = strike{afterRows: 1 + rng.IntN(left-1), delay: time.Duration(rng.IntN(40)) * time.Millisecond}
		}
		killed, ok := powerCut(t, fsys, cfg, out, st, fmt.Sprintf("dir %d cut %d", d, c), &tot)
		if !ok {
			t.Fatalf("dir %d cut %d: stopping the trials (above)", d, c)
		}
		c++
		if !killed { // the run ended by itself: its dataset is whole
			checkWhole(t, out)
			tot.rows += cutTasks * cutN
			next()
		}
	}
	if c > 0 {
		res := run(t, "run", cfg)
		if res.code != 0 {
			t.Fatalf("dir %d: the last resume exited %d:\n%s", d, res.code, res.stderr)
		}
		checkWhole(t, out)
		tot.rows += cutTasks * cutN
	}
	t.Logf("%d cut points (%d during a run, %d after it ended; a whole run took %v; %d output directories); %d rows checked after the cuts and %d in the finished runs; %d rows reported committed, all found; 0 lost",
		tot.cuts, tot.killed, tot.cuts-tot.killed, whole.Round(time.Millisecond), d+1, tot.checked, tot.rows, tot.reported)
}

// trialTotals are the trials' counts.
type trialTotals struct {
	cuts, killed int
	checked      int // rows read back after the cuts
	reported     int // rows the runs had reported committed
	rows         int // rows of the finished runs
}

func writeCutConfig(t *testing.T, dir, name, tasks, out string) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: powercut, progress: 0.02}
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
output: {dir: %s, file_rows: 100, batch_rows: 32, jsonl: true}
`, q(tasks), cutN, cutTimeScale, q(out))
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	rowsCommittedRe = regexp.MustCompile(`rows committed (\d+)`)
	rowsWrittenRe   = regexp.MustCompile(`(?m)^rows written: (\d+)`)
)

// strike is when a kill lands: delay after the run reported afterRows
// rows committed (at once when 0).
type strike struct {
	afterRows int
	delay     time.Duration
}

func (s strike) String() string {
	if s.afterRows > 0 {
		return fmt.Sprintf("%v after %d rows committed", s.delay.Round(time.Millisecond), s.afterRows)
	}
	return fmt.Sprintf("%v after start", s.delay.Round(time.Millisecond))
}

// lockedBuffer is a bytes.Buffer a child process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lastCommitted is the count of the last progress line's "rows
// committed" (0 before the first).
func lastCommitted(stderr string) int {
	m := rowsCommittedRe.FindAllStringSubmatch(stderr, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// powerCut runs cfg, kills it with SIGKILL where st says (unless it ended
// first), cuts the power and checks what survived against what the run
// reported. It reports whether the kill landed, and ok false when the
// trials cannot go on.
func powerCut(t *testing.T, fsys *crashfs.FS, cfg, out string, st strike, name string, tot *trialTotals) (killed, ok bool) {
	t.Helper()
	before := countRows(t, out)
	cmd := exec.Command(binary, "run", cfg)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var fire <-chan time.Time
	if st.afterRows <= 0 {
		fire = time.After(st.delay)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-fire:
			_ = cmd.Process.Kill() // SIGKILL: nothing of the run's own cleanup
			<-exited
			killed = cmd.ProcessState.ExitCode() == -1
			break wait
		case <-tick.C:
			if fire == nil && lastCommitted(stderr.String()) >= st.afterRows {
				fire = time.After(st.delay)
			}
		}
	}
	if !killed && cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("%s: the run exited %d before the cut:\n%s", name, cmd.ProcessState.ExitCode(), stderr.String())
		return false, false
	}
	// What the run reported committed: its last progress line, or its
	// summary when it finished.
	reported := lastCommitted(stderr.String())
	if m := rowsWrittenRe.FindStringSubmatch(stdout.String()); m != nil {
		reported, _ = strconv.Atoi(m[1])
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	tot.cuts++
	if killed {
		tot.killed++
	}
	var rows int
	rows, ok = checkSurvived(t, out, name)
	tot.checked += rows
	tot.reported += reported
	if rows < before+reported {
		t.Errorf("%s (killed %v, %v): %d rows after the cut; %d were there before the run and it reported %d more committed",
			name, killed, st, rows, before, reported)
		ok = false
	}
	if !killed && rows != cutTasks*cutN {
		t.Errorf("%s: the run had finished, and after the cut %d rows of %d are there", name, rows, cutTasks*cutN)
		ok = false
	}
	if !killed {
		// A finished run leaves its metrics durable too.
		if b, err := os.ReadFile(filepath.Join(out, schema.MetricsFile)); err != nil || !json.Valid(b) {
			t.Errorf("%s: the run had finished, and after the cut %s is %d bytes (%v)", name, schema.MetricsFile, len(b), err)
			ok = false
		}
	}
	t.Logf("%s: killed %v (%v); rows %d before, %d reported by the run, %d after the cut", name, killed, st, before, reported, rows)
	return killed, ok
}

// countRows counts the rows of the committed part files of out (all
// durable: the mount was just made from the last cut's image).
func countRows(t *testing.T, out string) int {
	t.Helper()
	rows, err := readback.Dir(filepath.Join(out, schema.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// checkSurvived reads back what a cut left in out: every part file whole
// (trajflow's reader, readback), each key once, beside each part its
// output.jsonl file with one line per row, every committed task's line
// in inputs.jsonl, a readable secret key. It returns the rows.
func checkSurvived(t *testing.T, out, name string) (int, bool) {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf(name+": "+format, args...)
		ok = false
	}
	seen := map[pipeline.Key]string{}
	maxTask := int64(-1)
	rows := 0
	paths, _ := filepath.Glob(filepath.Join(out, schema.DataDir, schema.PartGlob))
	for _, p := range paths {
		rs, err := readback.File(p)
		if err != nil {
			fail("a committed part does not read back: %v", err)
			continue
		}
		if len(rs) == 0 {
			fail("%s: a committed part without rows", p)
		}
		for _, r := range rs {
			k := r.Key()
			if prev, dup := seen[k]; dup {
				fail("key %+v in %s and in %s", k, prev, p)
			}
			seen[k] = p
			maxTask = max(maxTask, k.TaskIndex)
		}
		rows += len(rs)
		digits, _ := partName(filepath.Base(p))
		n, _ := strconv.Atoi(digits)
		side := filepath.Join(out, schema.JSONLDir, schema.GymJSONLName(schema.DataDir, n))
		if lines, err := countLines(side); err != nil {
			fail("the output.jsonl file of %s: %v", filepath.Base(p), err)
		} else if lines != len(rs) {
			fail("%s holds %d lines, its part %d rows", side, lines, len(rs))
		}
	}
	if maxTask >= 0 {
		last, err := lastInputTask(filepath.Join(out, schema.InputsFile))
		if err != nil {
			fail("%s: %v", schema.InputsFile, err)
		} else if last < maxTask {
			fail("%s holds tasks up to %d; task %d is committed", schema.InputsFile, last, maxTask)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, schema.SecretKeyFile)); err == nil && len(bytes.TrimSpace(b)) < 32 {
		fail("%s holds %d bytes after the cut", schema.SecretKeyFile, len(b))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		fail("%v", err)
	}
	return rows, ok
}

// checkWhole checks a finished run: every (task_index, rollout_index)
// once, the output.jsonl files one line per row, inputs.jsonl one line
// per task.
func checkWhole(t *testing.T, out string) {
	t.Helper()
	rows, err := readback.Dir(filepath.Join(out, schema.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		task    int64
		rollout int
	}
	seen := map[key]int{}
	for _, r := range rows {
		seen[key{r.Task.Index, r.RolloutIndex}]++
	}
	for task := range int64(cutTasks) {
		for ro := range cutN {
			if n := seen[key{task, ro}]; n != 1 {
				t.Errorf("%s: task %d rollout %d is there %d times", out, task, ro, n)
			}
		}
	}
	if len(rows) != cutTasks*cutN {
		t.Errorf("%s: %d rows, want %d", out, len(rows), cutTasks*cutN)
	}
	sides, _ := filepath.Glob(filepath.Join(out, schema.JSONLDir, "*.jsonl"))
	lines := 0
	for _, s := range sides {
		n, err := countLines(s)
		if err != nil {
			t.Fatal(err)
		}
		lines += n
	}
	if lines != len(rows) {
		t.Errorf("%s: the output.jsonl files hold %d lines for %d rows", out, lines, len(rows))
	}
	f, err := os.Open(filepath.Join(out, schema.InputsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks := map[int64]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var in struct {
			TaskIndex int64 `json:"task_index"`
		}
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.Fatalf("%s: %v", schema.InputsFile, err)
		}
		tasks[in.TaskIndex]++
	}
	for task := range int64(cutTasks) {
		if tasks[task] != 1 {
			t.Errorf("%s: %s holds task %d %d times", out, schema.InputsFile, task, tasks[task])
		}
	}
}

func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}

// lastInputTask is the highest task index of inputs.jsonl's whole lines
// (-1 when it has none).
func lastInputTask(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	last := int64(-1)
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(line, "\n") {
			break // a torn last line: a resume cuts it off
		}
		var in struct {
			TaskIndex int64 `json:"task_index"`
		}
		if json.Unmarshal([]byte(line), &in) != nil {
			break
		}
		last = max(last, in.TaskIndex)
	}
	return last, nil
}
