package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// runEnv runs trajflow with extra environment variables (and none of the
// scheduler's from the test's own environment).
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "SLURM_"), k == "JOB_COMPLETION_INDEX", k == "TRAJFLOW_SHARD_COUNT", k == "RANK", k == "WORLD_SIZE":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("trajflow %s: %v", strings.Join(args, " "), err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func slurm(index, count int) []string {
	return []string{fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", index), fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", count)}
}

// TestShardedRunEqualsUnsharded: four shards from Slurm's array variables
// with source.shard: auto, each under its own prefix, merged, hold exactly
// the rows of one unsharded run; stats on the root counts every shard.
func TestShardedRunEqualsUnsharded(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 50, 3)
	single := filepath.Join(dir, "single")
	root := filepath.Join(dir, "sharded")
	cfgSingle := writeConfig(t, dir, "single.yaml", runConfig{tasks: tasks, out: single, n: 4, fileRows: 40, batchRows: 16})
	cfg := writeConfig(t, dir, "sharded.yaml", runConfig{tasks: tasks, out: root, n: 4, fileRows: 40, batchRows: 16})
	if r := run(t, "run", cfgSingle); r.code != 0 {
		t.Fatalf("unsharded run: exit %d\n%s", r.code, r.stderr)
	}
	want := readDataset(t, filepath.Join(single, "data"))

	// Shard 2 of 4 alone: exactly the rows of its tasks, under its prefix.
	r := runEnv(t, slurm(2, 4), "run", cfg, "--set", "source.shard=auto")
	if r.code != 0 {
		t.Fatalf("shard 2: exit %d\n%s", r.code, r.stderr)
	}
	shard2 := filepath.Join(root, "shards", "00002-of-00004")
	got2 := readDataset(t, filepath.Join(shard2, "data"))
	n2 := 0
	for k, row := range want.rows {
		if k.TaskIndex%4 != 2 {
			continue
		}
		n2++
		g, ok := got2.rows[k]
		if !ok {
			t.Fatalf("shard 2 lacks %+v", k)
		}
		if !reflect.DeepEqual(deterministic(g), deterministic(row)) {
			t.Fatalf("shard 2 row %+v differs from the unsharded run's", k)
		}
	}
	if len(got2.rows) != n2 || n2 == 0 {
		t.Fatalf("shard 2 holds %d rows, want the %d of its tasks", len(got2.rows), n2)
	}
	if !strings.Contains(r.stdout, "shard: 2 of 4 (SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=4)") || !strings.Contains(r.stdout, shard2) {
		t.Errorf("summary does not name the shard and its directory:\n%s", r.stdout)
	}

	// Before the others ran: stats and merge say what is missing.
	r = run(t, "stats", "--json", root)
	if r.code != 0 || !strings.Contains(r.stderr, "1 of 4 shards") || !strings.Contains(r.stderr, "3 missing (00000-of-00004, 00001-of-00004, 00003-of-00004)") {
		t.Errorf("stats of a partial root: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(t, "merge", root, filepath.Join(dir, "partial")); r.code != 1 || !strings.Contains(r.stderr, "3 missing") {
		t.Errorf("merge of a partial root: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "partial")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused merge left its destination: %v", err)
	}

	// A shard of another count or another config is refused, exit 2.
	r = runEnv(t, slurm(1, 8), "run", cfg, "--set", "source.shard=auto")
	if r.code != 2 || !strings.Contains(r.stderr, "shard count: 4 → 8") || !strings.Contains(r.stderr, filepath.Join(root, "manifest.json")) {
		t.Errorf("shard of another count: exit %d\n%s", r.code, r.stderr)
	}
	r = runEnv(t, slurm(1, 4), "run", cfg, "--set", "source.shard=auto", "--set", "repeat.n=2")
	if r.code != 2 || !strings.Contains(r.stderr, "repeat.n") {
		t.Errorf("shard of another config: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "shards", "00001-of-00008")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused shard left its directory: %v", err)
	}
	r = runEnv(t, nil, "run", cfg, "--set", "source.shard=auto")
	if r.code != 2 || !strings.Contains(r.stderr, "SLURM_ARRAY_TASK_ID") {
		t.Errorf("auto without a scheduler: exit %d\n%s", r.code, r.stderr)
	}

	for _, i := range []int{0, 1, 3} {
		if r := runEnv(t, slurm(i, 4), "run", cfg, "--set", "source.shard=auto"); r.code != 0 {
			t.Fatalf("shard %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}

	// A shard run again resumes in its own directory: nothing is redone.
	r = runEnv(t, slurm(2, 4), "run", cfg, "--set", "source.shard=auto")
	if r.code != 0 || !strings.Contains(r.stdout, "rows written: 0") || !strings.Contains(r.stdout, "resumed:") {
		t.Errorf("shard 2 again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// stats on the root counts every shard.
	r = run(t, "stats", "--json", root)
	if r.code != 0 || !strings.Contains(r.stderr, "4 of 4 shards, all complete") {
		t.Fatalf("stats: exit %d\n%s", r.code, r.stderr)
	}
	var rootStats, singleStats map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rootStats); err != nil {
		t.Fatal(err)
	}
	r = run(t, "stats", "--json", single)
	if err := json.Unmarshal([]byte(r.stdout), &singleStats); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rows", "tasks", "correctness", "at_k"} {
		if rootStats[k] == nil || fmt.Sprint(rootStats[k]) != fmt.Sprint(singleStats[k]) {
			t.Errorf("stats %s: root %v, unsharded %v", k, rootStats[k], singleStats[k])
		}
	}
	// The same rewards, summed in another order.
	rr, sr := rootStats["reward"].(map[string]any), singleStats["reward"].(map[string]any)
	if rr["n"] != sr["n"] || math.Abs(rr["mean"].(float64)-sr["mean"].(float64)) > 1e-9 {
		t.Errorf("stats reward: root %v, unsharded %v", rr, sr)
	}

	// merge ROOT DEST: one dataset, files of even size, the rows of the
	// unsharded run.
	dest := filepath.Join(dir, "merged")
	r = run(t, "merge", "--rows-per-file", "60", root, dest)
	if r.code != 0 {
		t.Fatalf("merge: exit %d\n%s", r.code, r.stderr)
	}
	got := readDataset(t, filepath.Join(dest, "data"))
	if len(got.rows) != len(want.rows) {
		t.Fatalf("merged %d rows, the unsharded run has %d", len(got.rows), len(want.rows))
	}
	for k, row := range want.rows {
		g, ok := got.rows[k]
		if !ok {
			t.Fatalf("merged output lacks %+v", k)
		}
		if !reflect.DeepEqual(deterministic(g), deterministic(row)) {
			t.Fatalf("merged row %+v differs from the unsharded run's:\n%+v\n%+v", k, deterministic(g), deterministic(row))
		}
	}
	// 200 rows over ceil(200/60) = 4 files of about 50, cut between groups of 4.
	files := parts(t, filepath.Join(dest, "data"))
	if len(files) != 4 {
		t.Errorf("%d merged files, want 4", len(files))
	}
	perFile := map[string]int{}
	for _, f := range got.files {
		perFile[f]++
	}
	for f, n := range perFile {
		if n < 48 || n > 52 {
			t.Errorf("%s holds %d rows, want about 50", filepath.Base(f), n)
		}
	}
	// A merge never writes into a dataset that exists.
	if r := run(t, "merge", root, dest); r.code != 1 || !strings.Contains(r.stderr, "not empty") {
		t.Errorf("merge onto an existing dataset: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(parts(t, filepath.Join(dest, "data"))); n != 4 {
		t.Errorf("the refused merge changed the dataset: %d files", n)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".merged.merging-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary directories left: %v", leftovers)
	}
}
