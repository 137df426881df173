//go:build unix

package serve

import (
	"path/filepath"
	"strings"
	"testing"
)

// The served directory's lock keeps a second service out, and its release
// reports a failure (here: released twice).
func TestLockReleaseReportsItsErrors(t *testing.T) {
	dir := t.TempDir()
	release, err := lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second lock: %v, want in use", err)
	}
	if err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, lockFile)) {
		t.Fatalf("second release: %v, want an error naming %s", err, lockFile)
	}
	again, err := lock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
}
