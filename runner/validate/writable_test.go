package validate_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner/validate"
)

// An output directory on a read-only file system is a problem validate
// names (a run could not commit anything there), whoever runs it, root
// included; a writable one is not. The read-only file system is a tmpfs
// mounted read-only (root only: skipped elsewhere, failed under CI).
func TestValidateReadOnlyOutput(t *testing.T) {
	ro := t.TempDir()
	if err := syscall.Mount("tmpfs", ro, "tmpfs", syscall.MS_RDONLY, "size=1m"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a read-only tmpfs: %v (CI runs as root)", err)
		}
		t.Skipf("mounting a read-only tmpfs needs root: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(ro, 0) })
	for _, tt := range []struct {
		dir  string
		want string // "" for no problem
	}{
		{filepath.Join(ro, "out"), "read-only file system"},
		{filepath.Join(t.TempDir(), "out", "deeper"), ""},
	} {
		cfg, err := config.Decode([]byte(`
prompt: {user: "Solve: {question}"}
repeat: {n: 2, seed: 3}
generate: {endpoints: ["sim://"], model: sim, params: {max_tokens: 64}}
env: {name: math, answer_field: expected_answer}
`), "run.yaml", []string{"source.path=testdata/tasks.jsonl", "output.dir=" + tt.dir})
		if err != nil {
			t.Fatal(err)
		}
		err = validate.Run(context.Background(), cfg, validate.Options{Rows: 1, Out: io.Discard})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.dir, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "output.dir: "+tt.dir+": a run could not write there") || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want a problem naming output.dir and %q", tt.dir, err, tt.want)
		}
		if _, serr := os.Stat(tt.dir); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: validate wrote it (%v)", tt.dir, serr)
		}
	}
}
