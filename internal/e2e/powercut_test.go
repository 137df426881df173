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
	cutTrial(t, fsys, cutTarget{
		total: cutTasks * cutN,
		cmds: func(t *testing.T, out string) []*exec.Cmd {
			return []*exec.Cmd{exec.Command(binary, "run", writeCutConfig(t, dir, filepath.Base(out)+".yaml", tasks, out))}
		},
		rows:  countRows,
		check: checkQuickStart,
		whole: checkWhole,
	}, trialPoints(cutPoints), cutSeed)
}

// checkQuickStart is checkSurvived, and after a run that finished every
// row and metrics.json.
func checkQuickStart(t *testing.T, out, name string, finished bool) (int, bool) {
	t.Helper()
	rows, ok := checkSurvived(t, out, name)
	if finished {
		ok = checkFinished(t, out, name, rows, cutTasks*cutN) && ok
	}
	return rows, ok
}

// checkFinished checks a directory whose run had finished before the
// cut: all its rows there, and its metrics.
func checkFinished(t *testing.T, out, name string, rows, total int) bool {
	t.Helper()
	ok := true
	if rows != total {
		t.Errorf("%s: the run had finished, and after the cut %d rows of %d are there", name, rows, total)
		ok = false
	}
	if b, err := os.ReadFile(filepath.Join(out, schema.MetricsFile)); err != nil || !json.Valid(b) {
		t.Errorf("%s: the run had finished, and after the cut %s is %d bytes (%v)", name, schema.MetricsFile, len(b), err)
		ok = false
	}
	return ok
}

// trialPoints is a trial's cut points: def, or TRAJFLOW_POWERCUT_POINTS
// (bench/powercut runs the trials with 1,000).
func trialPoints(def int) int {
	if n, err := strconv.Atoi(os.Getenv("TRAJFLOW_POWERCUT_POINTS")); err == nil && n > 0 {
		return n
	}
	return def
}

// cutTarget is what a power-cut trial runs and checks: a config and a
// checker.
type cutTarget struct {
	total int // rows of a finished run
	// open, when set, is called as the trial starts a new output directory.
	open func(t *testing.T, out string)
	// cmds are the processes of one run into out (several for the shards
	// of a sharded run), made before each run.
	cmds func(t *testing.T, out string) []*exec.Cmd
	// rows counts the committed rows of out (after a cut: all durable).
	rows func(t *testing.T, out string) int
	// check checks what a cut left in out (finished: every process of the
	// run had ended by itself) and returns the rows read back.
	check func(t *testing.T, out, name string, finished bool) (int, bool)
	// whole checks out after its run finished: every row exactly once.
	whole func(t *testing.T, out string)
}

// cutTrial runs tg's power-cut trial: a first run to its end (it times a
// whole run; the kills below strike within parts of one) and a cut after
// its clean exit; then points cut points, each a SIGKILL at a seeded
// random moment followed by a power cut and tg.check, the next run
// resuming; output directories one after the other (runs on one are cut
// until one ends by itself, its dataset whole, then the next begins).
func cutTrial(t *testing.T, fsys *crashfs.FS, tg cutTarget, points int, seed uint64) trialTotals {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	var tot trialTotals
	begin := time.Now()
	calib := filepath.Join(fsys.Root(), "whole")
	if tg.open != nil {
		tg.open(t, calib)
	}
	start := time.Now()
	if _, ok := powerCut(t, fsys, tg, calib, strike{delay: time.Hour}, "a finished run", &tot); !ok {
		t.FailNow()
	}
	whole := time.Since(start)
	tg.whole(t, calib)
	d, out, c := -1, "", 0
	next := func() {
		d, c = d+1, 0
		out = filepath.Join(fsys.Root(), fmt.Sprintf("run%02d", d))
		if tg.open != nil {
			tg.open(t, out)
		}
	}
	next()
	for tot.cuts < points {
		// Every other cut strikes at a random moment of the run's first
		// part (the process's start, the resume's scan, the first
		// commits; now and then after the run's end), the others a random
		// moment after the run reported a random number of new rows
		// committed.
		st := strike{delay: time.Duration(rng.Float64() * 0.4 * float64(whole))}
		if left := tg.total - tg.rows(t, out); c%2 == 1 && left > 1 {
			st = strike{afterRows: 1 + rng.IntN(left-1), delay: time.Duration(rng.IntN(40)) * time.Millisecond}
		}
		// Every fifth cut comes after a kill without one: the resume
		// starts on what the killed run left, durable or not (a name
		// renamed into place before its directory's sync), and the cut
		// strikes the resume.
		if tot.cuts%5 == 4 {
			st.pre = time.Duration(rng.Float64() * 0.4 * float64(whole))
		}
		killed, ok := powerCut(t, fsys, tg, out, st, fmt.Sprintf("dir %d cut %d", d, c), &tot)
		if !ok {
			t.Fatalf("dir %d cut %d: stopping the trials (above)", d, c)
		}
		c++
		if !killed { // the run ended by itself: its dataset is whole
			tg.whole(t, out)
			tot.rows += tg.total
			next()
		}
	}
	if c > 0 {
		for i, cmd := range tg.cmds(t, out) {
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("dir %d: the last resume (process %d) failed: %v\n%s", d, i, err, stderr.String())
			}
		}
		tg.whole(t, out)
		tot.rows += tg.total
	}
	tot.dirs = d + 1
	t.Logf("%d cut points (%d during a run, %d after it ended; a whole run took %v; %d output directories); %d rows checked after the cuts and %d in the finished runs; %d rows reported committed, all found; 0 lost; %v in all",
		tot.cuts, tot.killed, tot.cuts-tot.killed, whole.Round(time.Millisecond), tot.dirs, tot.checked, tot.rows, tot.reported, time.Since(begin).Round(time.Second))
	return tot
}

// trialTotals are the trials' counts.
type trialTotals struct {
	cuts, killed int
	dirs         int
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
	// pre, when set, is a kill without a cut pre after an earlier run's
	// start; the run it strikes resumes from what that one left.
	pre time.Duration
}

func (s strike) String() string {
	w := fmt.Sprintf("%v after start", s.delay.Round(time.Millisecond))
	if s.afterRows > 0 {
		w = fmt.Sprintf("%v after %d rows committed", s.delay.Round(time.Millisecond), s.afterRows)
	}
	if s.pre > 0 {
		w = fmt.Sprintf("a run killed %v after its start without a cut, then a resume struck %s", s.pre.Round(time.Millisecond), w)
	}
	return w
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

// powerCut runs tg's processes into out, kills them with SIGKILL where st
// says (unless they ended first), cuts the power and checks what survived
// against what the processes reported. It reports whether a kill landed,
// and ok false when the trials cannot go on.
func powerCut(t *testing.T, fsys *crashfs.FS, tg cutTarget, out string, st strike, name string, tot *trialTotals) (killed, ok bool) {
	t.Helper()
	before := tg.rows(t, out)
	reported := 0
	if st.pre > 0 {
		// A kill without a cut: what that run reported committed was
		// durable when it was reported.
		k, r, ok := strikeRun(t, tg, out, strike{delay: st.pre}, name+" (the kill before)")
		if !ok {
			return false, false
		}
		reported += r
		killed = k
	}
	k, r, ok := strikeRun(t, tg, out, st, name)
	if !ok {
		return false, false
	}
	reported += r
	killed = killed || k
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	tot.cuts++
	if killed {
		tot.killed++
	}
	var rows int
	rows, ok = tg.check(t, out, name, !k)
	tot.checked += rows
	tot.reported += reported
	if rows < before+reported {
		t.Errorf("%s (killed %v, %v): %d rows after the cut; %d were there before the run and it reported %d more committed",
			name, killed, st, rows, before, reported)
		ok = false
	}
	t.Logf("%s: killed %v (%v); rows %d before, %d reported by the run, %d after the cut", name, killed, st, before, reported, rows)
	return k, ok
}

// strikeRun runs tg's processes into out and kills them where st says
// (unless they end first). It returns whether a kill landed and the rows
// they reported committed; ok false when a process failed.
func strikeRun(t *testing.T, tg cutTarget, out string, st strike, name string) (killed bool, reported int, ok bool) {
	t.Helper()
	cmds := tg.cmds(t, out)
	stdout := make([]*lockedBuffer, len(cmds))
	stderr := make([]*lockedBuffer, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		stdout[i], stderr[i] = &lockedBuffer{}, &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = stdout[i], stderr[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = cmd.Wait() }()
	}
	exited := make(chan struct{})
	go func() { wg.Wait(); close(exited) }()
	committed := func() int {
		n := 0
		for _, e := range stderr {
			n += lastCommitted(e.String())
		}
		return n
	}
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
			for _, cmd := range cmds {
				_ = cmd.Process.Kill() // SIGKILL: nothing of the run's own cleanup
			}
			<-exited
			break wait
		case <-tick.C:
			if fire == nil && committed() >= st.afterRows {
				fire = time.After(st.delay)
			}
		}
	}
	// What the runs reported committed: their last progress lines, or
	// their summaries where they finished.
	for i, cmd := range cmds {
		code := cmd.ProcessState.ExitCode()
		if code == -1 {
			killed = true
		} else if code != 0 {
			t.Errorf("%s: process %d exited %d before the cut:\n%s", name, i, code, stderr[i].String())
			return false, 0, false
		}
		r := lastCommitted(stderr[i].String())
		if m := rowsWrittenRe.FindStringSubmatch(stdout[i].String()); m != nil {
			r, _ = strconv.Atoi(m[1])
		}
		reported += r
	}
	return killed, reported, true
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
