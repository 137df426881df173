package main

import (
	"os"
	"testing"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

func TestMain(m *testing.M) {
	harness.MaybeChild() // the test binary doubles as trajflow for child processes
	os.Exit(m.Run())
}

// TestQuick runs the command's smoke mode end to end: 4 endpoints, every
// request answered, the balance and the child's resources reported.
func TestQuick(t *testing.T) {
	harness.RunQuick(t, run, []string{"-quick"}, "4 simulated endpoints × 100 slots", "1600 requests", "| peak in flight |")
}
