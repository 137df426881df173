package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trajflow/trajflow/readback"
)

// TestCrashResumeSteps: runs with output.steps killed with SIGKILL at
// random moments, then resumed to the end, leave every data part file
// with its steps file holding exactly its trajectories' steps, no steps
// file without its data file, and one step row per turn of every row.
func TestCrashResumeSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: seconds of simulated runs (skipped under -short)")
	}
	dir := t.TempDir()
	const tasks, n = 800, 4
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "steps.yaml", runConfig{
		tasks: writeTasks(t, dir, tasks, 3), out: out, n: n, timeScale: 0.05,
		fileRows: 64, batchRows: 16, steps: true,
	})
	data, steps := filepath.Join(out, "data"), filepath.Join(out, "steps")
	landed := 0
	for k := range 6 {
		before := len(parts(t, data))
		killed, res := runAndKill(t, cfg, data, before+1, time.Duration(k*37%200)*time.Millisecond)
		if !killed {
			if res.code != 0 {
				t.Fatalf("run %d exited %d:\n%s", k, res.code, res.stderr)
			}
			break
		}
		landed++
	}
	if landed == 0 {
		t.Fatal("no kill landed before its run finished")
	}
	final := run(t, "run", cfg)
	if final.code != 0 {
		t.Fatalf("final resume exited %d:\n%s%s", final.code, final.stdout, final.stderr)
	}
	dataParts, stepParts := parts(t, data), parts(t, steps)
	if len(dataParts) != len(stepParts) {
		t.Fatalf("%d data files, %d steps files", len(dataParts), len(stepParts))
	}
	entries, _ := os.ReadDir(steps)
	if len(entries) != len(stepParts) {
		t.Fatalf("steps directory holds %d entries, %d committed files", len(entries), len(stepParts))
	}
	rows, stepRows := 0, 0
	for i, p := range dataParts {
		if filepath.Base(p) != filepath.Base(stepParts[i]) {
			t.Fatalf("data %s paired with steps %s", p, stepParts[i])
		}
		trajs, err := readback.File(p)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := readback.StepsFile(stepParts[i])
		if err != nil {
			t.Fatal(err)
		}
		turns := map[string]int{}
		for _, r := range trajs {
			turns[r.TrajID] = r.NumTurns
		}
		seen := map[string]int{}
		for _, s := range ss {
			if _, ok := turns[s.TrajID]; !ok {
				t.Fatalf("%s: step of %s, not a trajectory of %s", stepParts[i], s.TrajID, p)
			}
			seen[s.TrajID]++
		}
		for id, nt := range turns {
			if seen[id] != nt {
				t.Fatalf("%s: %d steps of %s, num_turns %d", stepParts[i], seen[id], id, nt)
			}
		}
		rows += len(trajs)
		stepRows += len(ss)
	}
	if rows != tasks*n || stepRows < rows {
		t.Fatalf("%d rows (want %d), %d step rows", rows, tasks*n, stepRows)
	}
	t.Logf("%d kills landed; %d rows and %d step rows in %d paired files", landed, rows, stepRows, len(dataParts))
}
