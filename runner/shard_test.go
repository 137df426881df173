package runner_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner"
)

func lookup(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestShardAutoFromSlurm(t *testing.T) {
	cfg := quickstart(t, "source.limit=40", "source.shard=auto")
	root := cfg.Output.Dir
	sum, err := run(t, cfg, runner.Options{LookupEnv: lookup("SLURM_ARRAY_TASK_ID", "2", "SLURM_ARRAY_TASK_COUNT", "4")})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "shards", "00002-of-00004")
	if sum.Dir != dir || sum.Shard.Index != 2 || sum.Shard.Count != 4 {
		t.Errorf("summary dir %s shard %+v, want %s, 2 of 4", sum.Dir, sum.Shard, dir)
	}
	if !strings.Contains(sum.String(), "shard: 2 of 4 (SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_COUNT=4)") {
		t.Errorf("summary does not name the shard:\n%s", sum)
	}
	rs := readBack(t, dir, runner.DataDir)
	if len(rs) != 10*4 { // tasks 2, 6, ..., 38, four samples each
		t.Errorf("%d rows, want 40", len(rs))
	}
	for _, r := range rs {
		if r.Task.Index%4 != 2 {
			t.Fatalf("row of task %d in shard 2 of 4", r.Task.Index)
		}
	}
	for _, f := range []string{runner.MetricsFile, ".trajflow.lock"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the shard has no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, runner.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root holds a data directory: %v", err)
	}
	// The fingerprint's key is the root's, shared by every shard.
	if _, err := os.Stat(filepath.Join(root, runner.SecretKeyFile)); err != nil {
		t.Errorf("no key at the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, runner.SecretKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key in the shard's directory: %v", err)
	}
}

func TestExplicitShardWritesUnderItsPrefix(t *testing.T) {
	cfg := quickstart(t, "source.limit=12", "source.shard={index: 1, count: 3}")
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := runner.ShardDir(cfg.Output.Dir, 1, 3); sum.Dir != want {
		t.Errorf("dir %s, want %s", sum.Dir, want)
	}
	if got := len(readBack(t, sum.Dir, runner.DataDir)); got != 4*4 {
		t.Errorf("%d rows, want 16", got)
	}
}

func TestShardAutoWithoutEnvironmentIsRefused(t *testing.T) {
	cfg := quickstart(t, "source.shard=auto")
	_, err := run(t, cfg, runner.Options{LookupEnv: lookup()})
	var invalid *config.ValidationError
	if !errors.As(err, &invalid) {
		t.Fatalf("error %v, want a config error", err)
	}
	for _, s := range []string{"--set source.shard=auto", "source.shard", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "RANK"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
	if entries, _ := os.ReadDir(cfg.Output.Dir); len(entries) != 0 {
		t.Errorf("the refused run created %d entries in the output directory", len(entries))
	}
}
