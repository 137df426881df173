package grid

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registered name.
const Name = "grid"

func init() { envs.Register(Name, New) }

// Defaults of Options.
const (
	DefaultSize  = 5
	DefaultWalls = 3
)

// Options are the grid environment's config keys.
type Options struct {
	// Size is the width and height of the world, walls around it
	// excluded.
	//
	// Default: `5`.
	Size int `yaml:"size"`
	// Walls is the number of inner wall cells.
	//
	// Default: `3`.
	Walls int `yaml:"walls"`
}

// Env is the grid world. It keeps no per-game state: a game's state
// travels in Rollout.State as a State.
type Env struct{ opts Options }

var _ envs.Env = (*Env)(nil)

// New builds the grid environment from its options.
func New(opts envs.Options) (envs.Env, error) {
	o := Options{Size: DefaultSize, Walls: DefaultWalls}
	if err := opts.Decode(&o); err != nil {
		return nil, err
	}
	sec := opts.Section
	if sec == "" {
		sec = "env"
	}
	if o.Size < 2 || o.Size > 32 {
		return nil, fmt.Errorf("%s.size: must be in 2..32, got %d", sec, o.Size)
	}
	if o.Walls < 0 || o.Walls > o.Size*o.Size-2 {
		return nil, fmt.Errorf("%s.walls: must be in 0..%d (size² − 2), got %d", sec, o.Size*o.Size-2, o.Walls)
	}
	return &Env{opts: o}, nil
}

// State is one game's state: the world's rows (walls around included) and
// the agent's and the goal's cells.
type State struct {
	Rows           []string
	AR, AC, GR, GC int
	Moves, Invalid int
}

// Layout builds the world of a level: the same level always gives the
// same world, with a path from the agent to the goal.
func Layout(level uint64, size, walls int) State {
	rng := rand.New(rand.NewPCG(level, 0x677269645f656e76)) // "grid_env"
	for {
		cells := make([][]byte, size+2)
		for r := range cells {
			cells[r] = []byte(strings.Repeat(".", size+2))
			cells[r][0], cells[r][size+1] = '#', '#'
		}
		for c := range size + 2 {
			cells[0][c], cells[size+1][c] = '#', '#'
		}
		free := rng.Perm(size * size)
		cell := func(i int) (int, int) { return 1 + free[i]/size, 1 + free[i]%size }
		st := State{}
		st.AR, st.AC = cell(0)
		st.GR, st.GC = cell(1)
		for i := 2; i < 2+walls; i++ {
			r, c := cell(i)
			cells[r][c] = '#'
		}
		for _, row := range cells {
			st.Rows = append(st.Rows, string(row))
		}
		if st.reachable() {
			return st
		}
	}
}

// reachable reports whether the goal can be reached from the agent.
func (s State) reachable() bool {
	seen := map[[2]int]bool{{s.AR, s.AC}: true}
	queue := [][2]int{{s.AR, s.AC}}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == [2]int{s.GR, s.GC} {
			return true
		}
		for _, m := range moves {
			q := [2]int{p[0] + m.dr, p[1] + m.dc}
			if !seen[q] && s.Rows[q[0]][q[1]] != '#' {
				seen[q] = true
				queue = append(queue, q)
			}
		}
	}
	return false
}

// Grid draws the world: the rows with A on the agent's cell and G on the
// goal's. It is the state's anchor observation.
func (s State) Grid() string {
	var b strings.Builder
	for r, row := range s.Rows {
		line := []byte(row)
		if r == s.GR {
			line[s.GC] = 'G'
		}
		if r == s.AR {
			line[s.AC] = 'A'
		}
		if r > 0 {
			b.WriteByte('\n')
		}
		b.Write(line)
	}
	return b.String()
}

var moves = []struct {
	name   string
	dr, dc int
}{{"up", -1, 0}, {"down", 1, 0}, {"left", 0, -1}, {"right", 0, 1}}

// moveRe finds move words.
var moveRe = regexp.MustCompile(`(?i)\b(up|down|left|right)\b`)

// ParseMove returns the last move a reply names, "" when none.
func ParseMove(s string) string {
	m := moveRe.FindAllString(s, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.ToLower(m[len(m)-1])
}

const rules = "Grid world: walk from A (you) to G (the goal); # is a wall, . is floor. " +
	"Each turn, reply with one move: up, down, left or right."

// observation is the text the model sees of a state.
func observation(s State, feedback string) string {
	if feedback != "" {
		feedback += "\n"
	}
	return feedback + s.Grid()
}

// Reset lays out the task's world.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	level := uint64(0)
	if r.Task != nil {
		level = uint64(r.Task.Index)
		if v, ok := r.Task.Fields["level"]; ok && v != nil {
			n, ok := wholeNumber(v)
			if !ok || n < 0 {
				return nil, fmt.Errorf("%s: field \"level\" must be a whole number >= 0, got %v", r.Task.Source, v)
			}
			level = uint64(n)
		}
	}
	st := Layout(level, e.opts.Size, e.opts.Walls)
	anchor := st.Grid()
	return &envs.Reset{
		Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: rules + "\n" + observation(st, "")}},
		State:        st,
		Anchor:       &anchor,
	}, nil
}

// Step plays one move.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	st, ok := r.State.(State)
	if !ok {
		return nil, fmt.Errorf("grid: %s has no game state (got %T); was Reset called?", r, r.State)
	}
	st.Rows = append([]string(nil), st.Rows...)
	st.Moves++
	step := &envs.Step{ReportsValidity: true}
	var feedback string
	switch name := ParseMove(action.Content); name {
	case "":
		step.InvalidAction = true
		feedback = "No move read: reply with up, down, left or right."
	default:
		var m = moves[0]
		for _, x := range moves {
			if x.name == name {
				m = x
			}
		}
		nr, nc := st.AR+m.dr, st.AC+m.dc
		if st.Rows[nr][nc] == '#' {
			step.InvalidAction = true
			feedback = fmt.Sprintf("You cannot move %s: a wall.", name)
			break
		}
		st.AR, st.AC = nr, nc
		feedback = "You moved " + name + "."
	}
	if step.InvalidAction {
		st.Invalid++
	}
	solved := 0.0
	if st.AR == st.GR && st.AC == st.GC {
		step.Reward, step.Terminated, solved = 1, true, 1
		feedback += " You reached the goal!"
	}
	anchor := st.Grid()
	step.Anchor = &anchor
	step.Observations = []pipeline.Message{{Role: pipeline.RoleUser, Content: observation(st, feedback), Turn: action.Turn}}
	step.Metrics = map[string]float64{"moves": float64(st.Moves), "solved": solved}
	step.State = st
	return step, nil
}

func wholeNumber(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case float64:
		if x != float64(int64(x)) {
			return 0, false
		}
		return int64(x), true
	case interface{ Int64() (int64, error) }:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}
