package crashfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
)

// TestSetFree fills the disk after 10 bytes: a write past them fails
// whole with ENOSPC, the bytes before stay, and freeing space lets writes
// through again.
func TestSetFree(t *testing.T) {
	fsys := crashfstest.Mount(t)
	p := filepath.Join(fsys.Root(), "f")
	f, err := os.Create(p)
	check(t, err)
	defer f.Close()
	fsys.SetFree(10)
	if _, err := f.WriteString("12345678"); err != nil {
		t.Fatalf("a write that fits: %v", err)
	}
	if _, err := f.WriteString("abcde"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write past the free space: %v, want ENOSPC", err)
	}
	if _, err := f.WriteString("xy"); err != nil {
		t.Fatalf("the last 2 bytes: %v", err)
	}
	if _, err := f.WriteString("z"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write on a full disk: %v, want ENOSPC", err)
	}
	fsys.SetFree(-1)
	if _, err := f.WriteString("!"); err != nil {
		t.Fatalf("after the space is freed: %v", err)
	}
	b, err := os.ReadFile(p)
	check(t, err)
	if string(b) != "12345678xy!" {
		t.Errorf("file holds %q", b)
	}
	if st := fsys.Stats(); st.NoSpace != 2 || st.Written != 11 {
		t.Errorf("Stats: NoSpace %d, Written %d; want 2 and 11", st.NoSpace, st.Written)
	}
}

// TestInjectWrite fails the second write to files named *.tmp with EIO,
// once; other files are not touched.
func TestInjectWrite(t *testing.T) {
	fsys := crashfstest.Mount(t)
	fsys.Inject(crashfs.Fault{Op: crashfs.Write, Err: syscall.EIO, Match: "*.tmp", Skip: 1, Count: 1})
	other := filepath.Join(fsys.Root(), "other")
	write(t, other, "a", false)
	write(t, other, "b", false)
	f, err := os.Create(filepath.Join(fsys.Root(), "x.tmp"))
	check(t, err)
	defer f.Close()
	_, err = f.WriteString("1")
	check(t, err)
	if _, err := f.WriteString("2"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second write: %v, want EIO", err)
	}
	if _, err := f.WriteString("3"); err != nil {
		t.Fatalf("third write (the fault spent): %v", err)
	}
	b, err := os.ReadFile(f.Name())
	check(t, err)
	if string(b) != "13" {
		t.Errorf("file holds %q, want \"13\"", b)
	}
	if st := fsys.Stats(); st.Injected != 1 {
		t.Errorf("Stats.Injected = %d, want 1", st.Injected)
	}
}

// TestInjectFsync fails a file's fsync with EIO: nothing is made durable,
// and the fsync retried on the same descriptor reports success but makes
// nothing durable either (Linux's behaviour: the error is reported once),
// so that a writer that retries loses the data at the cut; a new
// descriptor's fsync works.
func TestInjectFsync(t *testing.T) {
	fsys := crashfstest.Mount(t)
	root := fsys.Root()
	for _, name := range []string{"retried", "reopened"} {
		write(t, filepath.Join(root, name), "old", true)
	}
	syncPath(t, root)
	fsys.Inject(crashfs.Fault{Op: crashfs.Fsync, Err: syscall.EIO, Match: "re*", Count: 2})
	for _, name := range []string{"retried", "reopened"} {
		f, err := os.OpenFile(filepath.Join(root, name), os.O_WRONLY|os.O_TRUNC, 0)
		check(t, err)
		_, err = f.WriteString("new")
		check(t, err)
		if err := f.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s: fsync: %v, want EIO", name, err)
		}
		if name == "retried" {
			if err := f.Sync(); err != nil {
				t.Fatalf("the retried fsync: %v (Linux reports success)", err)
			}
			check(t, f.Close())
			continue
		}
		check(t, f.Close())
		syncPath(t, filepath.Join(root, name)) // a new descriptor
	}
	if st := fsys.Stats(); st.RetriedSyncs != 1 || st.Injected != 2 {
		t.Errorf("Stats: %+v, want 1 retried sync and 2 injected", st)
	}
	check(t, fsys.Cut())
	for name, want := range map[string]string{"retried": "old", "reopened": "new"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		check(t, err)
		if string(b) != want {
			t.Errorf("%s after the cut: %q, want %q", name, b, want)
		}
	}
}

// TestInjectRename fails a rename with EIO: both names stay as they were;
// a directory's fsync failing leaves its entries as last synced.
func TestInjectRename(t *testing.T) {
	fsys := crashfstest.Mount(t)
	root := fsys.Root()
	write(t, filepath.Join(root, ".f.tmp"), "data", true)
	syncPath(t, root)
	fsys.Inject(crashfs.Fault{Op: crashfs.Rename, Err: syscall.EIO})
	err := os.Rename(filepath.Join(root, ".f.tmp"), filepath.Join(root, "f"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("rename: %v, want EIO", err)
	}
	if _, err := os.Stat(filepath.Join(root, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the target after a failed rename: %v", err)
	}
	fsys.ClearFaults()
	check(t, os.Rename(filepath.Join(root, ".f.tmp"), filepath.Join(root, "f")))
	fsys.Inject(crashfs.Fault{Op: crashfs.Fsync, Err: syscall.EIO, Match: "."}) // the root
	d, err := os.Open(root)
	check(t, err)
	err = d.Sync()
	check(t, d.Close())
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("directory fsync: %v, want EIO", err)
	}
	check(t, fsys.Cut())
	if _, err := os.Stat(filepath.Join(root, ".f.tmp")); err != nil {
		t.Errorf("the rename whose directory's fsync failed is undone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("f after the cut: %v, want gone", err)
	}
}
