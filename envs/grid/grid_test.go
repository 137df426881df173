package grid_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/grid"
	"github.com/trajflow/trajflow/pipeline"
)

func newEnv(t *testing.T, opts map[string]any) envs.Env {
	t.Helper()
	e, err := grid.New(envs.Options{Section: "env", Values: opts})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLayout(t *testing.T) {
	for level := range uint64(50) {
		a, b := grid.Layout(level, 4, 5), grid.Layout(level, 4, 5)
		if a.Grid() != b.Grid() {
			t.Fatalf("level %d: two layouts", level)
		}
		g := a.Grid()
		if strings.Count(g, "A") != 1 || strings.Count(g, "G") != 1 || strings.Count(g, "#") != 4*4+4+5 {
			t.Fatalf("level %d:\n%s", level, g)
		}
	}
	if grid.Layout(1, 4, 3).Grid() == grid.Layout(2, 4, 3).Grid() {
		t.Error("levels 1 and 2 have the same world")
	}
}

// TestMoves walks a known world: a wall bump and an unreadable reply are
// invalid and leave the agent in place (same anchor), a move changes the
// anchor, and reaching the goal ends the game with reward 1.
func TestMoves(t *testing.T) {
	env := newEnv(t, map[string]any{"size": 3, "walls": 0})
	r := &pipeline.Rollout{Task: &pipeline.Task{Index: 0, Fields: map[string]any{"level": 9}}}
	rs, err := env.Reset(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	st := grid.Layout(9, 3, 0)
	if *rs.Anchor != st.Grid() || !strings.Contains(rs.Observations[0].Content, st.Grid()) {
		t.Fatalf("reset anchor %q", *rs.Anchor)
	}
	r.State = rs.State
	anchor := *rs.Anchor
	step := func(reply string) *envs.Step {
		s, err := env.Step(context.Background(), r, pipeline.Message{Role: pipeline.RoleAssistant, Content: reply})
		if err != nil {
			t.Fatal(err)
		}
		r.State = s.State
		return s
	}
	s := step("hmm")
	if !s.InvalidAction || !s.ReportsValidity || *s.Anchor != anchor {
		t.Fatalf("unreadable reply: %+v", s)
	}
	// Walk to the goal along a shortest path, bumping the outer wall once.
	cur := st
	bumped := false
	for range 10 {
		var dir string
		switch {
		case cur.AR > cur.GR:
			dir = "up"
		case cur.AR < cur.GR:
			dir = "down"
		case cur.AC > cur.GC:
			dir = "left"
		default:
			dir = "right"
		}
		if !bumped && cur.AR == 1 {
			bumped = true
			if s := step("Move: up"); !s.InvalidAction || *s.Anchor != cur.Grid() {
				t.Fatalf("wall bump: %+v", s)
			}
		}
		s = step("I go " + dir)
		if s.InvalidAction {
			t.Fatalf("move %s invalid", dir)
		}
		cur = s.State.(grid.State)
		if *s.Anchor != cur.Grid() {
			t.Fatal("anchor is not the grid")
		}
		if s.Terminated {
			break
		}
	}
	if !s.Terminated || s.Reward != 1 || s.Metrics["solved"] != 1 {
		t.Fatalf("last step %+v", s)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"size": 1}, "env.size: must be in 2..32"},
		{map[string]any{"size": 3, "walls": 8}, "env.walls: must be in 0..7"},
		{map[string]any{"sise": 3}, "env.sise: unknown option"},
	} {
		_, err := grid.New(envs.Options{Section: "env", Values: c.opts})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.opts, err, c.want)
		}
	}
}

func ExampleLayout() {
	fmt.Println(grid.Layout(7, 3, 1).Grid())
	// Output:
	// #####
	// #..##
	// #GA.#
	// #...#
	// #####
}

func FuzzParseMove(f *testing.F) {
	for _, s := range []string{"Move: up", "left, no, RIGHT", "upward", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		switch m := grid.ParseMove(s); m {
		case "", "up", "down", "left", "right":
		default:
			t.Fatalf("ParseMove(%q) = %q", s, m)
		}
	})
}
