// Package crashfstest mounts a crashfs file system for a test: skipped
// with the reason where this machine cannot mount one, failed instead
// under CI=true (where .ci/run made sure it can), unmounted at the end.
package crashfstest

import (
	"errors"
	"os"
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
