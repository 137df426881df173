package main

import (
	"fmt"
	"os"
	"strings"
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

// TestQuickVersionJumps: the serve process over HTTP with a trainer that
// moves the policy on by two versions at each update (past max_staleness
// 1) while the fleet answers without token ids, in pause mode keep,
// serves every step of K groups, none twice (the command fails
// otherwise; before the fix of issue 46 the second step never came).
func TestQuickVersionJumps(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick", "-schedules", "http", "-jump", "2", "-api", "chat", "-pause", "keep"},
		"| serve over HTTP, generation-bound (train 0.5×), versions +2, api chat |", "| serve over HTTP, training-bound (train 2×), versions +2, api chat |")
}

// TestQuickDrift: the HTTP trainer acknowledges each step with its
// logprobs of the step's tokens (the engine's own), and the service
// measures drift 0 for every step (the command fails otherwise).
func TestQuickDrift(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick", "-schedules", "http", "-drift"},
		"| serve over HTTP, generation-bound (train 0.5×), acks with logprobs |", "(drift measured: 0)", "; CPU s: serve ")
}

// TestQuickFeatures: -features on runs the service with drift, an
// evaluation set and routed experts, and the command checks that each did
// its work (evaluations written, rows with routes; drift 0).
func TestQuickFeatures(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick", "-schedules", "http", "-http-train", "0.5", "-features", "on"},
		"features on (acks with logprobs, eval every 2 versions, routed experts)", "evaluations written", "kept rows with routed experts", "; CPU s: serve ")
}

// TestParseFeatures: each -features setting turns on what it names, and
// a name it does not know is refused, named.
func TestParseFeatures(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want features
		err  bool
	}{
		{"off", features{}, false},
		{"on", features{drift: true, eval: true, routes: true}, false},
		{"drift", features{drift: true}, false},
		{"eval+routes", features{eval: true, routes: true}, false},
		{"drift+bogus", features{}, true},
		{"", features{}, true},
	} {
		got, err := parseFeatures(tt.in)
		if (err != nil) != tt.err {
			t.Fatalf("parseFeatures(%q): error %v, want error %t", tt.in, err, tt.err)
		}
		if err == nil && got != tt.want {
			t.Fatalf("parseFeatures(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.in)) {
			t.Fatalf("parseFeatures(%q): %v does not name the setting", tt.in, err)
		}
	}
}
