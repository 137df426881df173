package e2e

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Workload of the crash test: enough simulated time that a run lasts a few
// seconds and commits tens of files.
const (
	crashTasks     = 4000
	crashN         = 4
	crashTimeScale = 0.05
	crashFileRows  = 200
	crashBatchRows = 64
	crashKills     = 20
	crashSeed      = 20261101
)

func TestCrashResume(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: several seconds of simulated runs (skipped under -short)")
	}
	dir := t.TempDir()
	tasks := writeTasks(t, dir, crashTasks, 1)
	cfg := func(name, out string) string {
		return writeConfig(t, dir, name, runConfig{
			tasks: tasks, out: out, n: crashN, timeScale: crashTimeScale,
			fileRows: crashFileRows, batchRows: crashBatchRows,
		})
	}
	cleanOut, crashOut := filepath.Join(dir, "clean"), filepath.Join(dir, "crash")
	cleanCfg, crashCfg := cfg("clean.yaml", cleanOut), cfg("crash.yaml", crashOut)

	// The reference: one uninterrupted run, alongside the crashed ones.
	cleanDone := make(chan result, 1)
	go func() {
		cmd := exec.Command(binary, "run", cleanCfg)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		cleanDone <- result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	}()

	rng := rand.New(rand.NewPCG(crashSeed, 0))
	crashData := filepath.Join(crashOut, "data")
	landed, planted := 0, false
	for k := range crashKills {
		before := len(parts(t, crashData))
		// Even kills wait for 1 or 2 new commits, then a random moment; odd
		// kills strike at a random moment after start, resume scan included.
		afterCommit := k%2 == 0
		wantFiles := before + 1 + rng.IntN(2)
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		if !afterCommit {
			wantFiles = 0
			delay = time.Duration(50+rng.IntN(700)) * time.Millisecond
		}
		killed, res := runAndKill(t, crashCfg, crashData, wantFiles, delay)
		after := parts(t, crashData)
		tmps := tmpFiles(t, crashData)
		t.Logf("kill %d (after commit %v, delay %v): landed %v, files %d -> %d, temp files left %v",
			k, afterCommit, delay, killed, before, len(after), tmps)
		if !killed {
			if res.code != 0 {
				t.Fatalf("run %d exited %d before the kill:\n%s", k, res.code, res.stderr)
			}
			break // the run finished first: nothing left to kill
		}
		landed++
		if !planted && len(after) > 0 {
			plantTempFiles(t, crashData, cleanOut)
			planted = true
			t.Logf("planted temporary files: %v", tmpFiles(t, crashData))
		}
	}
	if landed == 0 {
		t.Fatal("no kill landed before its run finished")
	}

	final := run(t, "run", crashCfg)
	if final.code != 0 {
		t.Fatalf("final resume exited %d:\n%s%s", final.code, final.stdout, final.stderr)
	}
	t.Logf("final resume:\n%s", final.stdout)
	clean := <-cleanDone
	if clean.code != 0 {
		t.Fatalf("clean run exited %d:\n%s%s", clean.code, clean.stdout, clean.stderr)
	}

	// (c) nothing but committed part files is left in the data directory.
	entries, err := os.ReadDir(crashData)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := partName(e.Name()); !ok {
			t.Errorf("data directory holds %s after the final run", e.Name())
		}
	}

	// (a), (b): both directories read back with Arrow's reader, every
	// column, checked allocator at zero, no duplicate key.
	want := readDataset(t, filepath.Join(cleanOut, "data"))
	got := readDataset(t, crashData)
	if len(want.rows) != crashTasks*crashN {
		t.Fatalf("clean run: %d rows, want %d", len(want.rows), crashTasks*crashN)
	}
	if len(got.fps) != 1 || !reflect.DeepEqual(got.fps, want.fps) {
		t.Errorf("config fingerprints: crashed run %v, clean run %v", got.fps, want.fps)
	}
	var missing, extra []pipeline.Key
	for k := range want.rows {
		if got.rows[k] == nil {
			missing = append(missing, k)
		}
	}
	for k := range got.rows {
		if want.rows[k] == nil {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("keys differ from the clean run: %d missing (e.g. %v), %d extra (e.g. %v)",
			len(missing), first(missing), len(extra), first(extra))
	}

	// (d) every row equals the clean run's, wall-clock fields aside.
	diffs := 0
	for k, w := range want.rows {
		g := got.rows[k]
		if dg, dw := deterministic(g), deterministic(w); !reflect.DeepEqual(dg, dw) {
			if diffs++; diffs <= 3 {
				t.Errorf("row %+v (%s) differs from the clean run's (%s): reward %v vs %v, seed %d vs %d, completion tokens %d vs %d",
					k, got.files[k], want.files[k], g.Reward, w.Reward, g.Seed, w.Seed, g.CompletionTokens, w.CompletionTokens)
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d of %d rows differ from the clean run", diffs, len(want.rows))
	}
	t.Logf("%d kills landed; %d rows in %d files match the clean run's %d files",
		landed, len(got.rows), len(parts(t, crashData)), len(parts(t, filepath.Join(cleanOut, "data"))))
}

// runAndKill starts a run and kills it with SIGKILL delay after the data
// directory holds at least wantFiles part files. It reports whether the
// kill ended the process; when the run finished first, res is its result.
func runAndKill(t *testing.T, cfg, data string, wantFiles int, delay time.Duration) (killed bool, res result) {
	t.Helper()
	cmd := exec.Command(binary, "run", cfg)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	{
		tick := time.NewTicker(5 * time.Millisecond)
		for len(parts(t, data)) < wantFiles {
			select {
			case <-exited:
				tick.Stop()
				return false, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("no file committed within a minute:\n%s", stderr.String())
			case <-tick.C:
			}
		}
		tick.Stop()
	}
	select {
	case <-exited:
		return false, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
	case <-time.After(delay):
	}
	_ = cmd.Process.Kill() // SIGKILL: no cleanup of any kind
	<-exited
	return cmd.ProcessState.ExitCode() == -1, result{code: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
}

// plantTempFiles leaves temporary files in the crashed run's data
// directory that a reader taking them for data would trip on: a copy of a
// clean-run file whose keys are not committed yet (taking it for data would
// skip those tasks, so keys would go missing) and a file of garbage.
func plantTempFiles(t *testing.T, data, cleanOut string) {
	t.Helper()
	committed := map[int64]bool{}
	for _, p := range parts(t, data) {
		rs, _ := readFile(t, p, nopAlloc)
		for _, r := range rs {
			committed[r.Task.Index] = true
		}
	}
	// Take the clean run's last file committed so far: the clean run runs
	// alongside, so this may wait for its first file.
	deadline := time.Now().Add(time.Minute)
	var src string
	for src == "" && time.Now().Before(deadline) {
		for _, p := range parts(t, filepath.Join(cleanOut, "data")) {
			rs, _ := readFile(t, p, nopAlloc)
			if !committed[rs[0].Task.Index] {
				src = p
			}
		}
		if src == "" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if src == "" {
		t.Log("no uncommitted clean-run file to plant; planting garbage only")
	} else {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, ".part-90000.parquet.tmp"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, ".part-90001.parquet.tmp"), []byte("PAR1 not a parquet file"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tmpFiles lists the temporary files of a data directory.
func tmpFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".part-*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// partName reports whether name is a committed part file's name.
func partName(name string) (string, bool) {
	digits, ok := strings.CutPrefix(name, "part-")
	if !ok {
		return "", false
	}
	digits, ok = strings.CutSuffix(digits, ".parquet")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	return digits, true
}

func first(keys []pipeline.Key) any {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}
