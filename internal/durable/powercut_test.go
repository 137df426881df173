package durable_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
)

// TestPowerCut: what each of the floor's functions reports written is
// there after a power cut (crashfs drops every unsynced write and every
// directory change whose directory was not synced); the same done with
// the os package alone is not, which shows the harness would see a
// missing sync.
func TestPowerCut(t *testing.T) {
	tests := []struct {
		name string
		// do writes under root, a fresh directory whose own name is
		// durable, and returns the files that must survive and their
		// content.
		do      func(t *testing.T, root string) map[string]string
		survive bool
	}{
		{"WriteFile in a new MkdirAll directory", func(t *testing.T, root string) map[string]string {
			dir := filepath.Join(root, "a", "b")
			must(t, durable.MkdirAll(dir, 0o755))
			must(t, durable.WriteFile(filepath.Join(dir, "state.json"), []byte("{}"), 0o644))
			return map[string]string{"a/b/state.json": "{}"}
		}, true},
		{"Create and Commit", func(t *testing.T, root string) map[string]string {
			f, err := durable.Create(filepath.Join(root, "part.parquet"), 0o644)
			must(t, err)
			_, err = f.Write([]byte("rows"))
			must(t, err)
			must(t, f.Commit())
			return map[string]string{"part.parquet": "rows"}
		}, true},
		{"CommitNew", func(t *testing.T, root string) map[string]string {
			f, err := durable.Create(filepath.Join(root, "key"), 0o600)
			must(t, err)
			_, err = f.Write([]byte("secret"))
			must(t, err)
			must(t, f.CommitNew())
			return map[string]string{"key": "secret"}
		}, true},
		{"OpenAppend and Sync", func(t *testing.T, root string) map[string]string {
			p := filepath.Join(root, "log.jsonl")
			for _, line := range []string{"1\n", "2\n"} {
				f, err := durable.OpenAppend(p, 0o644)
				must(t, err)
				_, err = f.WriteString(line)
				must(t, err)
				must(t, f.Sync())
				must(t, f.Close())
			}
			return map[string]string{"log.jsonl": "1\n2\n"}
		}, true},
		{"a killed writer's rename and mkdir, then SyncTree", func(t *testing.T, root string) map[string]string {
			// What a writer killed between its renames (its mkdirs) and
			// their directories' syncs leaves: synced files under names
			// that are not durable.
			for _, p := range []string{"data/part.parquet", "shards/0/data/part.parquet"} {
				path := filepath.Join(root, p)
				must(t, os.MkdirAll(filepath.Dir(path), 0o755))
				crashfstest.WriteKilled(t, path, []byte("rows"))
			}
			must(t, durable.SyncTree(root))
			return map[string]string{"data/part.parquet": "rows", "shards/0/data/part.parquet": "rows"}
		}, true},
		{"the same without SyncTree", func(t *testing.T, root string) map[string]string {
			path := filepath.Join(root, "data", "part.parquet")
			must(t, os.MkdirAll(filepath.Dir(path), 0o755))
			crashfstest.WriteKilled(t, path, []byte("rows"))
			return map[string]string{"data/part.parquet": "rows"}
		}, false},
		{"os.MkdirAll and durable.WriteFile (the directory's name is not durable)", func(t *testing.T, root string) map[string]string {
			dir := filepath.Join(root, "a", "b")
			must(t, os.MkdirAll(dir, 0o755))
			must(t, durable.WriteFile(filepath.Join(dir, "state.json"), []byte("{}"), 0o644))
			return map[string]string{"a/b/state.json": "{}"}
		}, false},
		{"os.WriteFile and a synced directory (the data is not durable)", func(t *testing.T, root string) map[string]string {
			must(t, os.WriteFile(filepath.Join(root, "key"), []byte("secret"), 0o600))
			must(t, durable.SyncDir(root))
			return map[string]string{"key": "secret"}
		}, false},
	}
	fsys := crashfstest.Mount(t)
	roots := make([]string, len(tests))
	for i := range tests {
		roots[i] = filepath.Join(fsys.Root(), string(rune('a'+i)))
		must(t, os.Mkdir(roots[i], 0o755))
	}
	must(t, durable.SyncDir(fsys.Root()))
	wants := make([]map[string]string, len(tests))
	for i, tt := range tests {
		wants[i] = tt.do(t, roots[i])
	}
	must(t, fsys.Cut())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, want := range wants[i] {
				b, err := os.ReadFile(filepath.Join(roots[i], name))
				got := err == nil && string(b) == want
				if got != tt.survive {
					t.Errorf("%s after the cut: %q, %v; survived %v, want %v", name, b, err, got, tt.survive)
				}
			}
		})
	}
}

// TestCommitNewKeepsTheFirst: a second CommitNew at the same path fails
// with fs.ErrExist, leaves the first file and no temporary one.
func TestCommitNewKeepsTheFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	for i, data := range []string{"first", "second"} {
		f, err := durable.Create(path, 0o600)
		must(t, err)
		_, err = f.Write([]byte(data))
		must(t, err)
		err = f.CommitNew()
		if i == 0 {
			must(t, err)
		} else if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second CommitNew: %v, want fs.ErrExist", err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "first" {
		t.Fatalf("%q, %v; want first", b, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: %v, %v; want 0600", fi, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries, want the file alone", len(entries))
	}
}

func TestMkdirAllOverAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	must(t, os.WriteFile(p, nil, 0o644))
	if err := durable.MkdirAll(filepath.Join(p, "sub"), 0o755); err == nil {
		t.Fatal("MkdirAll under a file succeeded")
	}
	must(t, durable.MkdirAll(filepath.Dir(p), 0o755)) // an existing directory
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
