// Command powercut is the benchmark of trajflow's durability, in two
// parts (BENCHMARKS.md has its figures).
//
// The cut points: it runs the power-cut trials of internal/e2e
// (TestPowerCutResume: quick-start runs killed with SIGKILL at random
// moments, each followed by a simulated power cut on a crashfs mount and a
// resume; TestServePowerCut: trajflow serve under a trainer stand-in, the
// same) with -cuts cut points in all, half each, through their own driver
// (go test, TRAJFLOW_POWERCUT_POINTS), and writes the counts: cut points,
// recoveries (the resumes and restarts after them), rows checked, rows
// lost (0, or it exits 1 with the trial's failure). It needs FUSE
// (/dev/fuse, root), as the trials do.
//
// The cost of durability: the same CPU-bound run (the instant simulator,
// -tasks × 4 rollouts) with trajflow built as it is and built with the
// nosync build tag (internal/durable: every fsync a no-op; a benchmarking
// hook, never in a release), -reps times each, alternating: rollouts per
// CPU-second of the process (user + system). Then the commit latency of a
// part: every part file the run wrote is committed again, one after the
// other, as sinks/parquet commits a part (durable.File: written under a
// temporary name, synced, renamed, the directory synced) and the same
// without the two syncs; p50 and p99 of each.
//
//	go run ./bench/powercut                      # 1,000 cut points; 20,000 tasks × 4
//	go run ./bench/powercut -cuts 200 -reps 5
//	go run ./bench/powercut -cuts 0              # the cost only (no FUSE needed)
//	go run ./bench/powercut -quick               # a smoke run (main_test.go)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Report is what the command measured (-json writes it).
type Report struct {
	Cuts  *CutCounts `json:"cuts,omitempty"`
	Costs *Costs     `json:"cost,omitempty"`
}

// CutCounts are the trials' counts.
type CutCounts struct {
	CutPoints    int     `json:"cut_points"`
	Recoveries   int     `json:"recoveries"`
	RunCuts      int     `json:"run_cut_points"`
	ServeCuts    int     `json:"serve_cut_points"`
	RowsChecked  int     `json:"rows_checked"`
	RowsReported int     `json:"rows_reported_committed"`
	StepsAcked   int     `json:"serve_steps_acknowledged"`
	KeptGroups   int     `json:"serve_kept_groups"`
	Lost         int     `json:"lost"`
	Seconds      float64 `json:"seconds"`
}

// Costs compare the syncs as they are with none.
type Costs struct {
	Rollouts      int       `json:"rollouts_per_run"`
	Parts         int       `json:"parts_per_run"`
	PartBytes     int64     `json:"mean_part_bytes"`
	SyncedPerCPUs []float64 `json:"synced_rollouts_per_cpu_second"`
	NoSyncPerCPUs []float64 `json:"nosync_rollouts_per_cpu_second"`
	SyncedWall    []float64 `json:"synced_wall_seconds"`
	NoSyncWall    []float64 `json:"nosync_wall_seconds"`
	CommitP50     float64   `json:"commit_p50_ms"`
	CommitP99     float64   `json:"commit_p99_ms"`
	NoSyncP50     float64   `json:"nosync_commit_p50_ms"`
	NoSyncP99     float64   `json:"nosync_commit_p99_ms"`
	CommitsTimed  int       `json:"commits_timed"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("powercut", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cuts := fs.Int("cuts", 1000, "cut points in all (half in runs, half in a serve session); 0: none")
	tasks := fs.Int("tasks", 20000, "tasks (× 4 rollouts) of the cost runs")
	reps := fs.Int("reps", 3, "cost runs of each build")
	quick := fs.Bool("quick", false, "a smoke run: 4 cut points, 1,000 tasks, 1 rep")
	dir := fs.String("dir", "", "work directory on the disk to measure (default: a temporary one under the current directory's disk, removed)")
	jsonPath := fs.String("json", "", "also write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*cuts, *tasks, *reps = 4, 1000, 1
	}
	if durable.SyncsDisabled {
		fmt.Fprintln(stderr, "powercut: this command was built with -tags nosync: build it without")
		return 2
	}
	root, err := repoRoot(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "powercut:", err)
		return 1
	}
	work := *dir
	if work == "" {
		// Not os.TempDir: /tmp may be a tmpfs, where fsync costs nothing.
		w, err := os.MkdirTemp(root, ".powercut-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "powercut:", err)
			return 1
		}
		defer func() { _ = os.RemoveAll(w) }() // best effort: the benchmark's own scratch
		work = w
	}
	var rep Report
	if *cuts > 0 {
		c, err := cutPoints(ctx, root, *cuts, stdout, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "powercut:", err)
			return 1
		}
		rep.Cuts = c
		fmt.Fprintf(stdout, "cut points: %d (%d in runs, %d in a serve session); recoveries: %d; rows checked: %d (%d reported committed, all found); serve: %d steps acknowledged, %d kept groups, each once; lost: %d; %.0f s\n",
			c.CutPoints, c.RunCuts, c.ServeCuts, c.Recoveries, c.RowsChecked, c.RowsReported, c.StepsAcked, c.KeptGroups, c.Lost, c.Seconds)
	}
	if *tasks > 0 && *reps > 0 {
		c, err := cost(ctx, root, work, *tasks, *reps, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "powercut:", err)
			return 1
		}
		rep.Costs = c
		fmt.Fprintf(stdout, "cost of durability (%d rollouts a run, %d parts of %.0f KiB on average, %d runs of each build):\n", c.Rollouts, c.Parts, float64(c.PartBytes)/1024, *reps)
		fmt.Fprintf(stdout, "| build | rollouts per CPU-second (each run) | median | wall s (each run) |\n|---|---|---|---|\n")
		fmt.Fprintf(stdout, "| syncs as they are | %s | %.0f | %s |\n", list(c.SyncedPerCPUs, "%.0f"), median(c.SyncedPerCPUs), list(c.SyncedWall, "%.2f"))
		fmt.Fprintf(stdout, "| -tags nosync | %s | %.0f | %s |\n", list(c.NoSyncPerCPUs, "%.0f"), median(c.NoSyncPerCPUs), list(c.NoSyncWall, "%.2f"))
		fmt.Fprintf(stdout, "commit of a part (%d commits each): synced p50 %.2f ms, p99 %.2f ms; without the syncs p50 %.2f ms, p99 %.2f ms\n",
			c.CommitsTimed, c.CommitP50, c.CommitP99, c.NoSyncP50, c.NoSyncP99)
	}
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "powercut:", err)
			return 1
		}
	}
	return 0
}

func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it inside the trajflow module")
	}
	return filepath.Dir(mod), nil
}

var (
	runLine   = regexp.MustCompile(`(\d+) cut points \((\d+) during a run, (\d+) after it ended;[^)]*\); (\d+) rows checked after the cuts and (\d+) in the finished runs; (\d+) rows reported committed, all found; 0 lost`)
	serveLine = regexp.MustCompile(`(\d+) cut points; (\d+) steps served, (\d+) acknowledged \(200\)[^;]*; (\d+) kept groups in data/, each once; 0 lost`)
)

// cutPoints runs the two trials through go test and reads their counts.
func cutPoints(ctx context.Context, root string, cuts int, stdout, stderr io.Writer) (*CutCounts, error) {
	start := time.Now()
	runCuts := (cuts + 1) / 2
	serveCuts := cuts - runCuts
	c := &CutCounts{}
	for _, tr := range []struct {
		test   string
		points int
	}{{"TestPowerCutResume", runCuts}, {"TestServePowerCut", serveCuts}} {
		if tr.points == 0 {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout=0", "-run", "^"+tr.test+"$", "./internal/e2e/")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TRAJFLOW_POWERCUT_POINTS="+strconv.Itoa(tr.points), "CI=true")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		fmt.Fprintf(stderr, "powercut: %s with %d cut points...\n", tr.test, tr.points)
		err := cmd.Run()
		text := out.String()
		if err != nil {
			return nil, fmt.Errorf("%s failed (%v): something reported committed was lost or damaged, or the trial could not run:\n%s", tr.test, err, failures(text))
		}
		switch tr.test {
		case "TestPowerCutResume":
			m := runLine.FindStringSubmatch(text)
			if m == nil {
				return nil, fmt.Errorf("%s: no summary line in its output:\n%s", tr.test, tail(text))
			}
			n := atoi(m[1])
			c.RunCuts, c.CutPoints = n, c.CutPoints+n
			c.Recoveries += n // each cut is followed by a resume
			c.RowsChecked += atoi(m[4]) + atoi(m[5])
			c.RowsReported += atoi(m[6])
		case "TestServePowerCut":
			m := serveLine.FindStringSubmatch(text)
			if m == nil {
				return nil, fmt.Errorf("%s: no summary line in its output:\n%s", tr.test, tail(text))
			}
			n := atoi(m[1])
			c.ServeCuts, c.CutPoints = n, c.CutPoints+n
			c.Recoveries += n // each cut is followed by a restart
			c.StepsAcked = atoi(m[3])
			c.KeptGroups = atoi(m[4])
			c.RowsChecked += atoi(m[4])
		}
	}
	c.Seconds = time.Since(start).Seconds()
	return c, nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// failures is the lines of a failed go test that say what failed.
func failures(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "killed true") || strings.Contains(line, "killed false") {
			continue // the trial's log of each cut
		}
		b.WriteString(line + "\n")
	}
	return tail(b.String())
}

func tail(s string) string {
	if len(s) > 8000 {
		return "…" + s[len(s)-8000:]
	}
	return s
}

// cost builds trajflow twice (as it is, and -tags nosync), runs the same
// CPU-bound run with each, alternating, and times the commits of its
// part files.
func cost(ctx context.Context, root, work string, tasks, reps int, stderr io.Writer) (*Costs, error) {
	bins := map[bool]string{false: filepath.Join(work, "trajflow"), true: filepath.Join(work, "trajflow-nosync")}
	for nosync, bin := range bins {
		args := []string{"build", "-o", bin}
		if nosync {
			args = append(args, "-tags", "nosync")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/trajflow")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	taskFile := filepath.Join(work, "tasks.jsonl")
	if err := writeTasks(taskFile, tasks); err != nil {
		return nil, err
	}
	c := &Costs{Rollouts: tasks * 4}
	var lastOut string
	for i := range reps {
		for _, nosync := range []bool{false, true} {
			out := filepath.Join(work, fmt.Sprintf("out-%d-%v", i, nosync))
			cfg := filepath.Join(work, fmt.Sprintf("run-%d-%v.yaml", i, nosync))
			text := fmt.Sprintf(`run: {id: powercut-cost, progress: 0}
source: {path: %q}
prompt: {user: "Solve: {question}"}
repeat: {n: 4, seed: 1}
generate: {endpoints: ["sim://"], model: sim-math, concurrency: 256, params: {max_tokens: 64}, sim: {seed: 1, time_scale: 0}}
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %q, file_rows: 1000, jsonl: true}
`, taskFile, out)
			if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
				return nil, err
			}
			cmd := exec.CommandContext(ctx, bins[nosync], "run", cfg)
			var outb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &outb, &outb
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("%s run: %v\n%s", bins[nosync], err, tail(outb.String()))
			}
			wall := time.Since(start).Seconds()
			if !strings.Contains(outb.String(), fmt.Sprintf("rows written: %d", tasks*4)) {
				return nil, fmt.Errorf("%s: the run did not write %d rows:\n%s", bins[nosync], tasks*4, tail(outb.String()))
			}
			if nosync != strings.Contains(outb.String(), "built with -tags nosync") {
				return nil, fmt.Errorf("%s: -tags nosync %v, and its output says otherwise:\n%s", bins[nosync], nosync, tail(outb.String()))
			}
			cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
			fmt.Fprintf(stderr, "powercut: rep %d nosync=%v: %.2f s wall, %.2f CPU-s\n", i, nosync, wall, cpu)
			if nosync {
				c.NoSyncPerCPUs = append(c.NoSyncPerCPUs, float64(tasks*4)/cpu)
				c.NoSyncWall = append(c.NoSyncWall, wall)
			} else {
				c.SyncedPerCPUs = append(c.SyncedPerCPUs, float64(tasks*4)/cpu)
				c.SyncedWall = append(c.SyncedWall, wall)
				lastOut = out
			}
		}
	}
	parts, _ := filepath.Glob(filepath.Join(lastOut, schema.DataDir, schema.PartGlob))
	if len(parts) == 0 {
		return nil, fmt.Errorf("no part files in %s", lastOut)
	}
	c.Parts = len(parts)
	var synced, bare []time.Duration
	into := filepath.Join(work, "commits")
	if err := durable.MkdirAll(into, 0o755); err != nil {
		return nil, err
	}
	var total int64
	for round := 0; len(synced) < 200; round++ {
		for i, p := range parts {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			total += int64(len(b))
			name := filepath.Join(into, fmt.Sprintf("part-%05d.parquet", round*len(parts)+i))
			d, err := commitSynced(name, b)
			if err != nil {
				return nil, err
			}
			synced = append(synced, d)
			d, err = commitBare(name+".bare", b)
			if err != nil {
				return nil, err
			}
			bare = append(bare, d)
		}
	}
	c.PartBytes = total / int64(len(synced))
	c.CommitsTimed = len(synced)
	c.CommitP50, c.CommitP99 = pct(synced, 50), pct(synced, 99)
	c.NoSyncP50, c.NoSyncP99 = pct(bare, 50), pct(bare, 99)
	return c, nil
}

// commitSynced commits b at path as sinks/parquet commits a part.
func commitSynced(path string, b []byte) (time.Duration, error) {
	start := time.Now()
	f, err := durable.Create(path, 0o644)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(b); err != nil {
		return 0, errors.Join(err, f.Abort())
	}
	if err := f.Commit(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// commitBare is commitSynced without the file's and the directory's
// syncs (what a -tags nosync build does).
func commitBare(path string, b []byte) (time.Duration, error) {
	start := time.Now()
	tmp := filepath.Join(filepath.Dir(path), schema.TempName(filepath.Base(path)))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func pct(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return float64(s[max(i, 0)]) / float64(time.Millisecond)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func list(xs []float64, f string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(parts, ", ")
}

// writeTasks writes n addition tasks.
func writeTasks(path string, n int) error {
	var b bytes.Buffer
	for i := range n {
		a, c := 10+i%90, 10+(i*7)%90
		fmt.Fprintf(&b, `{"id": "t-%06d", "question": "What is %d + %d?", "expected_answer": "%d"}`+"\n", i, a, c, a+c)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
