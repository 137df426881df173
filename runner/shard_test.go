package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/schema"

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
	rs := readBack(t, dir, schema.DataDir)
	if len(rs) != 10*4 { // tasks 2, 6, ..., 38, four samples each
		t.Errorf("%d rows, want 40", len(rs))
	}
	for _, r := range rs {
		if r.Task.Index%4 != 2 {
			t.Fatalf("row of task %d in shard 2 of 4", r.Task.Index)
		}
	}
	for _, f := range []string{schema.MetricsFile, ".trajflow.lock"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the shard has no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, schema.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root holds a data directory: %v", err)
	}
	// The fingerprint's key is the root's, shared by every shard.
	if _, err := os.Stat(filepath.Join(root, schema.SecretKeyFile)); err != nil {
		t.Errorf("no key at the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, schema.SecretKeyFile)); !errors.Is(err, os.ErrNotExist) {
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
	if got := len(readBack(t, sum.Dir, schema.DataDir)); got != 4*4 {
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

func TestManifestRefusesAnotherRun(t *testing.T) {
	base := quickstart(t, "source.limit=8")
	root := base.Output.Dir
	sharded := func(index, count int, sets ...string) *config.Config {
		return quickstart(t, append([]string{"source.limit=8", "output.dir=" + root,
			fmt.Sprintf("source.shard={index: %d, count: %d}", index, count)}, sets...)...)
	}
	if _, err := run(t, sharded(0, 4), runner.Options{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, schema.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Shards            int    `json:"shards"`
		ConfigFingerprint string `json:"config_fingerprint"`
		SchemaVersion     string `json:"schema_version"`
		RunID             string `json:"run_id"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Shards != 4 || m.ConfigFingerprint == "" || m.SchemaVersion != schema.Version || m.RunID != filepath.Base(root) {
		t.Errorf("manifest %s", b)
	}
	// Another shard of the same run is welcome; with its own index.
	if _, err := run(t, sharded(1, 4), runner.Options{}); err != nil {
		t.Fatalf("shard 1 of the same run: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want []string
	}{
		{"another count", sharded(1, 8), []string{"shard count: 4 → 8", schema.ManifestFile}},
		{"another config", sharded(2, 4, "repeat.n=2"), []string{"repeat.n", schema.ManifestFile}},
		{"not sharded", quickstart(t, "source.limit=8", "output.dir="+root), []string{"run of 4 shards", "not sharded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.cfg, runner.Options{})
			if !errors.Is(err, runner.ErrManifest) {
				t.Fatalf("error %v, want ErrManifest", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
	entries, _ := os.ReadDir(filepath.Join(root, "shards"))
	if len(entries) != 2 {
		t.Errorf("%d shard directories, want the 2 accepted ones", len(entries))
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(root, "shards", e.Name(), schema.ShardStatusFile))
		if err != nil || !strings.Contains(string(b), `"complete": true`) {
			t.Errorf("%s: status %s, %v", e.Name(), b, err)
		}
	}
}

func TestShardedRunOnUnshardedOutputIsRefused(t *testing.T) {
	cfg := quickstart(t, "source.limit=4")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	again := quickstart(t, "source.limit=4", "output.dir="+cfg.Output.Dir, "source.shard={index: 0, count: 2}")
	if _, err := run(t, again, runner.Options{}); !errors.Is(err, runner.ErrManifest) || !strings.Contains(err.Error(), "not sharded") {
		t.Fatalf("error %v, want ErrManifest naming the unsharded run", err)
	}
}

// A shard stopped before its input ended records that it is incomplete;
// its rerun resumes, completes it, and says so.
func TestShardStatusAfterInterrupt(t *testing.T) {
	cfg := quickstart(t, "source.limit=40", "source.shard={index: 1, count: 2}")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := runner.Run(ctx, cfg, runner.Options{})
	if !errors.Is(err, runner.ErrInterrupted) {
		t.Fatalf("error %v, want ErrInterrupted", err)
	}
	dir := runner.ShardDir(cfg.Output.Dir, 1, 2)
	status := func() map[string]any {
		b, err := os.ReadFile(filepath.Join(dir, schema.ShardStatusFile))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if st := status(); st["complete"] != false || st["stop"] == nil {
		t.Errorf("status after the interrupt: %v", st)
	}
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	if st := status(); st["complete"] != true || st["index"] != 1.0 || st["count"] != 2.0 {
		t.Errorf("status after the rerun: %v", st)
	}
	if got := len(readBack(t, dir, schema.DataDir)); got != 20*4 {
		t.Errorf("%d rows, want 80", got)
	}
}
