package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

func TestMain(m *testing.M) {
	harness.MaybeChild() // the test binary doubles as trajflow for child processes
	os.Exit(m.Run())
}

// TestQuick runs one small round: every rollout ok in both runs, the hung
// endpoint named in the log, its attempts moved, a canary counted on each
// endpoint of the hung run and none alone. No timing is asserted.
func TestQuick(t *testing.T) {
	out := filepath.Join(t.TempDir(), "runs.json")
	harness.RunQuick(t, run, []string{"-tasks", "20", "-rounds", "1", "-json", out}, "| round | hung | wall s |", "one hung ÷ healthy alone")
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var runs []Run
	if err := json.Unmarshal(b, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	alone, hung := runs[0], runs[1]
	if alone.Hung || alone.Rows != 80 || alone.Moved != 0 || alone.HealthyCanary != 0 || alone.HungNamed {
		t.Fatalf("healthy run %+v: want 80 rows ok, nothing moved, no canary", alone)
	}
	if !hung.Hung || hung.Rows != 80 || hung.Moved == 0 || !hung.HungNamed || hung.HungCanary == 0 || hung.HealthyCanary == 0 {
		t.Fatalf("hung run %+v: want 80 rows ok, the hung endpoint named, its attempts moved, a canary on each", hung)
	}
}
