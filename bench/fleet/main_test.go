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

// TestQuick runs the command's smoke mode end to end: 4 endpoints, every
// request answered, the balance and the child's resources reported.
func TestQuick(t *testing.T) {
	harness.RunQuick(t, run, []string{"-quick"}, "4 simulated endpoints × 100 slots", "1600 requests", "| peak in flight |")
}

// TestQuickHung runs the smoke mode with -hung 0,1 (the silence watch at
// its defaults): every request answered in both runs, the hung endpoint
// named in the run's log and its attempts moved, the figures sane. No
// timing is asserted.
func TestQuickHung(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark's smoke mode twice")
	}
	path := filepath.Join(t.TempDir(), "hung.json")
	harness.RunQuick(t, run, []string{"-quick", "-hung", "0,1", "-json", path}, "| pair | hung |", "ratio hung ÷ healthy")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs    []Result  `json:"runs"`
		Compare []Compare `json:"compare"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 2 || got.Runs[0].Hung != 0 || got.Runs[1].Hung != 1 || len(got.Compare) != 1 {
		t.Fatalf("runs %+v, compare %+v: want one healthy run, one with 1 hung, one comparison", got.Runs, got.Compare)
	}
	for _, r := range got.Runs {
		if r.Requests != 1600 || r.ActualS <= 0 || r.WallS < r.ActualS || r.IdealS <= 0 || r.PerMin <= 0 {
			t.Errorf("run %+v: figures not sane", r)
		}
	}
	healthy, hung := got.Runs[0], got.Runs[1]
	if healthy.Moved != 0 || healthy.HungHeld != 0 {
		t.Errorf("healthy run %+v: attempts moved or held", healthy)
	}
	// Moved counts the attempts the client had on the hung endpoint when
	// it went silent, HungHeld those that reached its server: an attempt
	// still on its way then is moved and never held, so neither bounds
	// the other.
	if !hung.HungNamed || hung.Moved <= 0 || hung.HungHeld <= 0 {
		t.Errorf("hung run %+v: want the hung endpoint named in the log, holding attempts, and its attempts moved", hung)
	}
	if c := got.Compare[0]; c.Ratio <= 0 || c.HealthyS != healthy.ActualS || c.HungS != hung.ActualS || c.Moved != hung.Moved {
		t.Errorf("compare %+v does not match the runs", c)
	}
}
