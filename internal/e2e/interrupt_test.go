//go:build unix

package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInterruptResume interrupts a run with SIGINT after its first commit:
// the run exits 130, keeps what it committed (the open file included: it
// holds whole groups), and a resume completes the data with no key twice.
func TestInterruptResume(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated run of about a second (skipped under -short)")
	}
	const tasks, n = 600, 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "config.yaml", runConfig{
		tasks: writeTasks(t, dir, tasks, 3), out: out, n: n, timeScale: crashTimeScale,
		fileRows: crashFileRows, batchRows: crashBatchRows,
	})
	data := filepath.Join(out, "data")

	cmd := exec.Command(binary, "run", cfg)
	stderr := interruptAfterFirstCommit(t, cmd, data)
	if code := cmd.ProcessState.ExitCode(); code == 0 {
		t.Skip("the run finished before the interrupt reached it")
	} else if code != 130 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("interrupted run exited %d, want 130 with a message:\n%s", code, stderr.String())
	}
	if tmps := tmpFiles(t, data); len(tmps) > 0 {
		t.Errorf("an interrupted run left temporary files %v", tmps)
	}
	partial := readDataset(t, data)
	if len(partial.rows) == 0 || len(partial.rows) >= tasks*n {
		t.Fatalf("interrupted run committed %d rows of %d", len(partial.rows), tasks*n)
	}

	res := run(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("resume exited %d:\n%s", res.code, res.stderr)
	}
	final := readDataset(t, data)
	if len(final.rows) != tasks*n {
		t.Fatalf("after the resume: %d rows, want %d", len(final.rows), tasks*n)
	}
	for k, r := range partial.rows {
		if g := final.rows[k]; g == nil || final.files[k] != partial.files[k] || g.Reward != r.Reward {
			t.Errorf("row %+v committed before the interrupt changed on resume", k)
		}
	}
}
