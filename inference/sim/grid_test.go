package sim

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestFindGrid(t *testing.T) {
	msgs := []pipeline.Message{
		{Role: pipeline.RoleUser, Content: "Step 1 observation:\n####\n#A.#\n#.G#\n####\nnow:\nYou moved up.\n#####\n#..G#\n#A#.#\n#####"},
	}
	g, ok := findGrid(msgs)
	if !ok || g.ar != 2 || g.ac != 1 || g.gr != 1 || g.gc != 3 || len(g.rows) != 4 {
		t.Fatalf("grid %+v, want the last one", g)
	}
	if _, ok := findGrid([]pipeline.Message{{Role: pipeline.RoleUser, Content: "no grid here\n..."}}); ok {
		t.Fatal("found a grid in plain text")
	}
}

// TestGridMoves: a right trajectory steps along a shortest path (around
// a wall), a wrong one wanders; about GridInvalidRate of the replies name
// no move; the same key gives the same reply.
func TestGridMoves(t *testing.T) {
	g, _ := findGrid([]pipeline.Message{{Role: pipeline.RoleUser, Content: "#####\n#A#G#\n#...#\n#####"}})
	invalid, n := 0, 2000
	for k := range uint64(n) {
		m := g.move(true, k)
		if m != g.move(true, k) {
			t.Fatal("not deterministic")
		}
		switch {
		case !strings.HasPrefix(m, "Move: "):
			invalid++
		case m != "Move: down":
			t.Fatalf("right move %q, want down (around the wall)", m)
		}
	}
	if r := float64(invalid) / float64(n); r < GridInvalidRate/2 || r > GridInvalidRate*2 {
		t.Fatalf("%.3f of replies without a move, want about %v", r, GridInvalidRate)
	}
	dirs := map[string]bool{}
	for k := range uint64(200) {
		dirs[g.move(false, k)] = true
	}
	if len(dirs) < 4 {
		t.Fatalf("a wrong trajectory made only %v", dirs)
	}
}
