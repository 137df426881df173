package durable_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
)

// TestWriteFileFaults: a full disk or an I/O error at any step of
// WriteFile (the write, the file's fsync, the rename) fails it with that
// error naming the file; the file committed before is untouched, before
// and after a power cut; no temporary file is left; the failed fsync is
// not retried (crashfs counts a retry on the same descriptor).
func TestWriteFileFaults(t *testing.T) {
	fsys := crashfstest.Mount(t)
	tests := []struct {
		name   string
		inject func()
		want   syscall.Errno
	}{
		{"disk full", func() { fsys.SetFree(3) }, syscall.ENOSPC},
		{"write EIO", func() { fsys.Inject(crashfs.Fault{Op: crashfs.Write, Err: syscall.EIO}) }, syscall.EIO},
		{"fsync EIO", func() {
			fsys.Inject(crashfs.Fault{Op: crashfs.Fsync, Err: syscall.EIO, Match: ".state*"})
		}, syscall.EIO},
		{"rename EIO", func() { fsys.Inject(crashfs.Fault{Op: crashfs.Rename, Err: syscall.EIO}) }, syscall.EIO},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(fsys.Root(), strings.Repeat("d", i+1))
			must(t, durable.MkdirAll(dir, 0o755))
			p := filepath.Join(dir, "state")
			must(t, durable.WriteFile(p, []byte("old"), 0o644))
			tc.inject()
			err := durable.WriteFile(p, []byte("new content"), 0o644)
			fsys.ClearFaults()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("WriteFile: %v, want %v naming %s", err, tc.want, dir)
			}
			if st := fsys.Stats(); st.RetriedSyncs != 0 {
				t.Errorf("%d fsyncs retried after a failure", st.RetriedSyncs)
			}
			for _, when := range []string{"before the cut", "after the cut"} {
				if when == "after the cut" {
					must(t, fsys.Cut())
				}
				b, err := os.ReadFile(p)
				if err != nil || string(b) != "old" {
					t.Errorf("%s: the committed file holds %q (%v), want \"old\"", when, b, err)
				}
				ents, err := os.ReadDir(dir)
				must(t, err)
				if len(ents) != 1 {
					t.Errorf("%s: %d files in the directory, want the committed one alone", when, len(ents))
				}
			}
		})
	}
}

// TestSpaceNeeded: a write that a full disk refuses returns a
// *SpaceError naming the temporary file and the bytes it needed in all
// (those written and the refused write's), whose message is the write's
// and which is still a full disk and a *fs.PathError.
func TestSpaceNeeded(t *testing.T) {
	fsys := crashfstest.Mount(t)
	f, err := durable.Create(filepath.Join(fsys.Root(), "part"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	if _, err := f.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	fsys.SetFree(100)
	defer fsys.ClearFaults()
	_, err = f.Write(make([]byte, 500))
	se, ok := durable.Needed(err)
	if !ok || se.Size != 1500 || se.Path != f.Name() || !durable.DiskFull(err) || durable.FailedPath(err) != f.Name() {
		t.Fatalf("a write refused for space: %v (%+v, %v)", err, se, ok)
	}
	if _, ok := durable.Needed(errors.New("other")); ok {
		t.Error("a plain error taken for a full disk")
	}
}
