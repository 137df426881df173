//go:build unix

package serve

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

// The served directory's lock keeps a second service out, and its release
// reports a failure (here: released twice).
func TestLockReleaseReportsItsErrors(t *testing.T) {
	dir := t.TempDir()
	release, err := lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock(dir); !errors.Is(err, durable.ErrLocked) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second lock: %v, want in use (durable.ErrLocked)", err)
	}
	if err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, schema.ServeLockFile)) {
		t.Fatalf("second release: %v, want an error naming %s", err, schema.ServeLockFile)
	}
	again, err := lock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
}
