package sim

import (
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Grid worlds: the simulated model plays the grid game of trajflow's
// `grid` environment. It reads the last grid drawn in the last user
// message (rows of '#' wall, '.' floor, 'A' the agent, 'G' the goal, all
// of one width) and replies "Move: up|down|left|right". A right
// trajectory takes the first step of a shortest path to the goal; a wrong
// one moves at random, walls and edges included. Either way, about one
// reply in GridInvalidRate names no move at all. Every draw is keyed by
// the simulator's seed, the prompt, the sample and the turn.

// GridInvalidRate is the share of grid replies that name no move.
const GridInvalidRate = 0.15

// gridMoves are the moves, in the order a shortest path prefers them.
var gridMoves = []struct {
	name   string
	dr, dc int
}{{"up", -1, 0}, {"down", 1, 0}, {"left", 0, -1}, {"right", 0, 1}}

// grid is a grid world found in a conversation.
type grid struct {
	rows           []string
	ar, ac, gr, gc int
}

// findGrid reads the last grid of the last user message.
func findGrid(msgs []pipeline.Message) (*grid, bool) {
	var last string
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == pipeline.RoleUser {
			last = msgs[i].Content
			break
		}
	}
	var block, cur []string
	for line := range strings.SplitSeq(last, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && strings.Trim(line, "#.AG") == "" && (len(cur) == 0 || len(line) == len(cur[0])) {
			cur = append(cur, line)
			continue
		}
		if len(cur) >= 2 {
			block = cur
		}
		cur = nil
		if line != "" && strings.Trim(line, "#.AG") == "" {
			cur = []string{line}
		}
	}
	if len(cur) >= 2 {
		block = cur
	}
	g := &grid{rows: block, ar: -1, gr: -1}
	for r, row := range block {
		if c := strings.IndexByte(row, 'A'); c >= 0 {
			g.ar, g.ac = r, c
		}
		if c := strings.IndexByte(row, 'G'); c >= 0 {
			g.gr, g.gc = r, c
		}
	}
	if g.ar < 0 || g.gr < 0 {
		return nil, false
	}
	return g, true
}

func (g *grid) free(r, c int) bool {
	return r >= 0 && r < len(g.rows) && c >= 0 && c < len(g.rows[r]) && g.rows[r][c] != '#'
}

// move is the reply's tail: "Move: DIR", or a sentence without a move.
func (g *grid) move(right bool, k uint64) string {
	if uniform(key(k, 1)) < GridInvalidRate {
		return "I am not sure where to go."
	}
	if !right {
		return "Move: " + gridMoves[mix(key(k, 2))%4].name
	}
	// Breadth-first search back from the goal: the first move is one
	// that enters a cell closer to it.
	dist := map[[2]int]int{{g.gr, g.gc}: 0}
	queue := [][2]int{{g.gr, g.gc}}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, m := range gridMoves {
			q := [2]int{p[0] + m.dr, p[1] + m.dc}
			if _, seen := dist[q]; !seen && g.free(q[0], q[1]) {
				dist[q] = dist[p] + 1
				queue = append(queue, q)
			}
		}
	}
	here, ok := dist[[2]int{g.ar, g.ac}]
	for _, m := range gridMoves {
		if d, reach := dist[[2]int{g.ar + m.dr, g.ac + m.dc}]; ok && reach && d < here {
			return "Move: " + m.name
		}
	}
	return "Move: " + gridMoves[mix(key(k, 2))%4].name // no path: wander
}
