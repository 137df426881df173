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

// TestQuick runs the command's smoke mode end to end.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick"}, "| single 4·B | trajflow |", "| multi 1-4 turns, env 0.1s | barrier, 32/batch |", "| ds K=8 n=4 keep=0.5 | barrier, G=24 |", "committed 8 groups, 0 with zero std", "| ds K=8 n=4 keep=0.5 | trajflow, order: task |", "the first K passing in task order")
}
