// Package crashfstest mounts a crashfs file system for a test: skipped
// with the reason where this machine cannot mount one, failed instead
// under CI=true (where .ci/run made sure it can), unmounted at the end.
package crashfstest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
)

// Mount mounts a crashfs file system in a temporary directory of t, or
// skips t (fails it under CI=true) where FUSE cannot be mounted here. It
// is unmounted when t ends.
func Mount(t testing.TB) *crashfs.FS {
	t.Helper()
	fsys, err := crashfs.Mount(t.TempDir())
	if errors.Is(err, crashfs.ErrUnavailable) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: the power-cut tests must run; they need /dev/fuse and the right to mount, as root)", err)
		}
		t.Skipf("%v: the power-cut tests need /dev/fuse and the right to mount (as root)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Close(); err != nil {
			t.Error(err)
		}
	})
	return fsys
}

// WriteKilled leaves at path what a writer killed between a rename and
// its directory's sync leaves: data written under a temporary name beside
// path, synced, and renamed to path; no directory synced, so that the
// content is durable and the name is not.
func WriteKilled(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".killed-"+filepath.Base(path))
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
