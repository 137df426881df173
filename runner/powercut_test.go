package runner_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
)

// TestResumeOfAKilledRunSurvivesAPowerCut: a run killed between its
// renames (its mkdirs) and their directories' syncs leaves files whose
// data is durable under names that are not. A resume takes those parts
// as committed and commits nothing of theirs again; unless it makes the
// names durable first, a power cut after it takes them back and the rows
// are gone although the resume finished. Here every name of a finished
// output directory (a run's, a shard's under its root) is made that way,
// the resume runs, the power is cut, and every row must be there.
func TestResumeOfAKilledRunSurvivesAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	for _, tt := range []struct {
		name  string
		shard []string
	}{
		{"a run", nil},
		{"a shard", []string{"source.shard={index: 1, count: 2}"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(fsys.Root(), filepath.Base(t.Name()))
			cfg := quickstart(t, append([]string{"source.limit=20", "output.file_rows=8", "output.batch_rows=8", "output.dir=" + root}, tt.shard...)...)
			sum, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := root
			if cfg.Source.Shard.Sharded() {
				dir = runner.ShardDir(root, cfg.Source.Shard.Index, cfg.Source.Shard.Count)
			}
			want := keys(readBack(t, dir, schema.DataDir))
			if len(want) == 0 || int64(len(want)) != sum.Rows {
				t.Fatalf("the first run committed %d rows, its summary says %d", len(want), sum.Rows)
			}
			unsyncNames(t, root)

			cfg = quickstart(t, append([]string{"source.limit=20", "output.file_rows=8", "output.batch_rows=8", "output.dir=" + root}, tt.shard...)...)
			sum, err = run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Resumed == 0 || sum.Rows != 0 {
				t.Fatalf("the resume: %d tasks resumed, %d rows written; want all resumed, none written", sum.Resumed, sum.Rows)
			}
			if err := fsys.Cut(); err != nil {
				t.Fatal(err)
			}
			if got := keys(readBack(t, dir, schema.DataDir)); !slices.Equal(got, want) {
				t.Fatalf("after the resume and a power cut %d rows are there, of %d committed", len(got), len(want))
			}
		})
	}
}

// unsyncNames rewrites every file under root as a killed run leaves
// them at worst: each file's data synced, no directory synced, so that
// no name under root (root's own included) is durable.
func unsyncNames(t *testing.T, root string) {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[path], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncDir(filepath.Dir(root)); err != nil {
		t.Fatal(err)
	}
	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		crashfstest.WriteKilled(t, path, b)
	}
}
