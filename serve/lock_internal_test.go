//go:build unix

package serve

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
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

// A service killed between its state's rename and the served
// directory's sync left a state.json whose name is not durable; the next
// service's lock step makes it durable before serving from it, so that a
// power cut after does not take back what it served from.
func TestLockMakesAKilledServiceStateDurable(t *testing.T) {
	fsys := crashfstest.Mount(t)
	out := filepath.Join(fsys.Root(), "out")
	served := filepath.Join(out, schema.ServedDir)
	if err := durable.MkdirAll(served, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(served, schema.ServeStateFile)
	crashfstest.WriteKilled(t, path, []byte(`{"next": 3}`))
	b := &boot{cfg: &config.Config{}}
	b.cfg.Output.Dir = out
	release, err := b.lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != `{"next": 3}` {
		t.Fatalf("after the cut %s holds %q (%v)", schema.ServeStateFile, got, err)
	}
}
