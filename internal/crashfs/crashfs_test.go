package crashfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
)

// write creates path with data, optionally synced, and closes it.
func write(t *testing.T, path, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncPath(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// gone marks a file that must not exist after the cut.
const gone = "\x00gone"

// TestCut runs each case in its own durable directory, cuts the power
// once, and checks what survived.
func TestCut(t *testing.T) {
	tests := []struct {
		name string
		// do works in dir, a durable directory of the mount.
		do   func(t *testing.T, dir string)
		want map[string]string // name under dir → content, or gone
	}{
		{
			name: "write and rename without fsync loses the data",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, ".f.tmp"), "data", false)
				check(t, os.Rename(filepath.Join(dir, ".f.tmp"), filepath.Join(dir, "f")))
				syncPath(t, dir) // the name is durable, the data is not
			},
			want: map[string]string{"f": "", ".f.tmp": gone},
		},
		{
			name: "write and rename with neither synced leaves nothing",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, ".f.tmp"), "data", false)
				check(t, os.Rename(filepath.Join(dir, ".f.tmp"), filepath.Join(dir, "f")))
			},
			want: map[string]string{"f": gone, ".f.tmp": gone},
		},
		{
			name: "fsync of the file and of its directory survives",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, ".f.tmp"), "data", true)
				check(t, os.Rename(filepath.Join(dir, ".f.tmp"), filepath.Join(dir, "f")))
				syncPath(t, dir)
			},
			want: map[string]string{"f": "data", ".f.tmp": gone},
		},
		{
			name: "a created file whose directory was not synced is gone",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "f"), "data", true)
			},
			want: map[string]string{"f": gone},
		},
		{
			name: "a rename whose directory was not synced reverts",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a"), "old", true)
				syncPath(t, dir)
				check(t, os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")))
			},
			want: map[string]string{"a": "old", "b": gone},
		},
		{
			name: "a replacing rename whose directory was not synced keeps the old content",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a"), "old", true)
				syncPath(t, dir)
				write(t, filepath.Join(dir, ".a.tmp"), "new", true)
				check(t, os.Rename(filepath.Join(dir, ".a.tmp"), filepath.Join(dir, "a")))
			},
			want: map[string]string{"a": "old", ".a.tmp": gone},
		},
		{
			name: "an unlink whose directory was not synced reverts",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a"), "kept", true)
				syncPath(t, dir)
				check(t, os.Remove(filepath.Join(dir, "a")))
			},
			want: map[string]string{"a": "kept"},
		},
		{
			name: "an unlink whose directory was synced is durable",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "a"), "x", true)
				syncPath(t, dir)
				check(t, os.Remove(filepath.Join(dir, "a")))
				syncPath(t, dir)
			},
			want: map[string]string{"a": gone},
		},
		{
			name: "an append after the last fsync is lost",
			do: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "log")
				write(t, p, "line1\n", true)
				syncPath(t, dir)
				f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
				check(t, err)
				_, err = f.WriteString("line2\n")
				check(t, err)
				check(t, f.Close())
			},
			want: map[string]string{"log": "line1\n"},
		},
		{
			name: "a link into place without fsync is an empty file",
			do: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, ".key.tmp"), "secret", false)
				check(t, os.Link(filepath.Join(dir, ".key.tmp"), filepath.Join(dir, "key")))
				check(t, os.Remove(filepath.Join(dir, ".key.tmp")))
				syncPath(t, dir)
			},
			want: map[string]string{"key": "", ".key.tmp": gone},
		},
		{
			name: "a directory whose parent was not synced is gone with its files",
			do: func(t *testing.T, dir string) {
				sub := filepath.Join(dir, "sub")
				check(t, os.Mkdir(sub, 0o755))
				write(t, filepath.Join(sub, "f"), "data", true)
				syncPath(t, sub)
			},
			want: map[string]string{"sub/f": gone, "sub": gone},
		},
		{
			name: "a directory made durable all the way keeps its files",
			do: func(t *testing.T, dir string) {
				sub := filepath.Join(dir, "sub")
				check(t, os.Mkdir(sub, 0o755))
				write(t, filepath.Join(sub, "f"), "data", true)
				syncPath(t, sub)
				syncPath(t, dir)
			},
			want: map[string]string{"sub/f": "data"},
		},
		{
			name: "a file synced through its fd after its name was removed",
			do: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "a")
				write(t, p, "v1", true)
				syncPath(t, dir)
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				check(t, err)
				check(t, os.Remove(p))
				_, err = f.WriteAt([]byte("v2"), 0)
				check(t, err)
				check(t, f.Sync()) // the inode's data is durable; its unlink is not
				check(t, f.Close())
				write(t, filepath.Join(dir, "b"), "other", true) // may reuse nothing of a
				syncPath(t, filepath.Join(dir, "b"))
			},
			want: map[string]string{"a": "v2", "b": gone},
		},
	}
	fsys := crashfstest.Mount(t)
	root := fsys.Root()
	dirs := make([]string, len(tests))
	for i := range tests {
		dirs[i] = filepath.Join(root, "case"+string(rune('a'+i)))
		check(t, os.Mkdir(dirs[i], 0o755))
	}
	syncPath(t, root)
	for i, tt := range tests {
		tt.do(t, dirs[i])
	}
	check(t, fsys.Cut())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, want := range tt.want {
				b, err := os.ReadFile(filepath.Join(dirs[i], name))
				if want == gone {
					if !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s: survived the cut (%q, %v), want gone", name, b, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v, want %q", name, err, want)
				} else if string(b) != want {
					t.Errorf("%s: %q after the cut, want %q", name, b, want)
				}
			}
		})
	}
	if st := fsys.Stats(); st.Cuts != 1 || st.FileSyncs == 0 || st.DirSyncs == 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCutTwice: what survived one cut is durable: a second cut right
// after changes nothing; work after the remount follows the same rules.
func TestCutTwice(t *testing.T) {
	fsys := crashfstest.Mount(t)
	root := fsys.Root()
	write(t, filepath.Join(root, "a"), "1", true)
	write(t, filepath.Join(root, "b"), "2", false)
	syncPath(t, root)
	check(t, fsys.Cut())
	check(t, fsys.Cut())
	for name, want := range map[string]string{"a": "1", "b": ""} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	write(t, filepath.Join(root, "c"), "3", true)
	check(t, fsys.Cut())
	if _, err := os.Stat(filepath.Join(root, "c")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("c survived without a sync of its directory: %v", err)
	}
}

// TestUnavailable: the error where FUSE is missing wraps ErrUnavailable,
// which crashfstest turns into a skip.
func TestUnavailable(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err == nil {
		t.Skip("/dev/fuse exists here")
	}
	if _, err := crashfs.Mount(t.TempDir()); !errors.Is(err, crashfs.ErrUnavailable) {
		t.Fatalf("Mount without /dev/fuse: %v, want ErrUnavailable", err)
	}
}
