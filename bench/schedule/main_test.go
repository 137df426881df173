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

// TestBoundRows checks -bounds' rows on a small synthetic workload: the
// bounds row, FirstKept's sweep (five M, five cancellations) and one row
// per hedgeBounds policy, each reaching the target.
func TestBoundRows(t *testing.T) {
	var oracle []harness.OracleGroup
	for g := range 40 {
		grp := harness.OracleGroup{Task: int64(g), Kept: g%3 != 0}
		for i := range 4 {
			ok := i == 0 || (g%3 == 0) // a kept group has one right member, the others none
			grp.Trajs = append(grp.Trajs, &harness.Traj{TaskIndex: int64(g), Correct: ok,
				Turns: []harness.Turn{{Prompt: 4, Decode: 5 + (g*7+i*13)%40}}})
		}
		oracle = append(oracle, grp)
	}
	w := harness.Workload{Name: "synthetic", Keep: 2.0 / 3, Target: 6}
	work, ok := harness.Prefix(oracle, w.Target)
	if !ok {
		t.Fatal("the synthetic oracle holds fewer kept groups than the target")
	}
	c := harness.Cost{A: 1, C: 0.01, P: 0.005, B: 8}
	ideal := harness.IdealOf(harness.AllTrajs(work), c)
	rows := boundRows(w, ideal, oracle, work, c, 16)
	if want := 1 + 5*5 + len(hedgeBounds); len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for _, r := range rows[1:] {
		if r.Kept != w.Target || r.Efficiency <= 0 || r.Generated <= 0 {
			t.Errorf("%s: kept %d, efficiency %g, generated %d", r.Schedule, r.Kept, r.Efficiency, r.Generated)
		}
	}
}
