package harness

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// RunFunc is a benchmark command's entry point, as Main runs it.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// RunQuick runs a command's run function with args (skipped under -short)
// and fails t unless it exits 0 with every want in its standard output.
func RunQuick(t *testing.T, run RunFunc, args []string, wants ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the benchmark's smoke mode")
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), args, &out, &errs); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
