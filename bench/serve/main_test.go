package main

import (
	"os"
	"testing"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

func TestMain(m *testing.M) {
	harness.MaybeChild()
	os.Exit(m.Run())
}

// TestQuick runs the command's smoke mode end to end: every schedule
// commits exactly S·K kept groups, and the serve process serves S steps
// of K groups over HTTP, none twice (the command fails otherwise).
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick"}, "| continuous, pause abort |", "| continuous, pause keep |", "| one run per step |", "| barrier, G=8 |",
		"| serve over HTTP, generation-bound (train 0.5×) |", "| serve over HTTP, training-bound (train 2×) |")
}
