package harness

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference/openai"
)

func TestIdealOf(t *testing.T) {
	c := Cost{A: 0.004, C: 0.0001, P: 0.00001, B: 2}
	tests := []struct {
		name             string
		trajs            []*Traj
		d, p, lmax       int64
		busy, chain, tId float64
	}{
		{"empty", nil, 0, 0, 0, 0, 0, 0},
		{
			name:  "batch-bound",
			trajs: []*Traj{{Turns: []Turn{{Prompt: 10, Decode: 100}}}, {Turns: []Turn{{Prompt: 10, Decode: 100}}}, {Turns: []Turn{{Prompt: 10, Decode: 100}}}},
			d:     300, p: 30, lmax: 100,
			// a·max(300/2, 100) + c·300 + p·30
			busy: 0.004*150 + 0.0001*300 + 0.00001*30, chain: 0.00001*10 + 100*0.0041, tId: 0.004*150 + 0.0001*300 + 0.00001*30,
		},
		{
			name: "chain-bound",
			trajs: []*Traj{{Turns: []Turn{
				{Prompt: 10, Decode: 10, EnvDelay: time.Second},
				{Prompt: 30, Decode: 10, EnvDelay: time.Second},
			}}},
			d: 20, p: 40, lmax: 20,
			busy: 0.004*20 + 0.0001*20 + 0.00001*40, chain: 0.00001*40 + 20*0.0041 + 2, tId: 0.00001*40 + 20*0.0041 + 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := IdealOf(tt.trajs, c)
			if id.D != tt.d || id.P != tt.p || id.LMax != tt.lmax {
				t.Errorf("D, P, LMax = %d, %d, %d; want %d, %d, %d", id.D, id.P, id.LMax, tt.d, tt.p, tt.lmax)
			}
			for _, x := range []struct {
				name      string
				got, want float64
			}{{"busy", id.Busy.Seconds(), tt.busy}, {"chain", id.Chain.Seconds(), tt.chain}, {"T", id.T.Seconds(), tt.tId}} {
				if math.Abs(x.got-x.want) > 1e-6 {
					t.Errorf("%s = %g, want %g", x.name, x.got, x.want)
				}
			}
		})
	}
}

func TestPrefix(t *testing.T) {
	gs := []OracleGroup{{Task: 0}, {Task: 1, Kept: true}, {Task: 2}, {Task: 3, Kept: true}, {Task: 4, Kept: true}}
	for _, tt := range []struct {
		target, len int
		ok          bool
	}{{1, 2, true}, {2, 4, true}, {3, 5, true}, {4, 5, false}} {
		p, ok := Prefix(gs, tt.target)
		if len(p) != tt.len || ok != tt.ok {
			t.Errorf("Prefix(%d) = %d groups, %v; want %d, %v", tt.target, len(p), ok, tt.len, tt.ok)
		}
	}
}

func TestParseGroupID(t *testing.T) {
	for _, tt := range []struct {
		id      string
		task    int64
		attempt int
	}{{"t17-a2", 17, 2}, {"t0-a0", 0, 0}, {"group", -1, -1}, {"", -1, -1}} {
		task, attempt := parseGroupID(tt.id)
		if task != tt.task || attempt != tt.attempt {
			t.Errorf("parseGroupID(%q) = %d, %d; want %d, %d", tt.id, task, attempt, tt.task, tt.attempt)
		}
	}
}

func FuzzParseGroupID(f *testing.F) {
	for _, s := range []string{"t1-a0", "t-1-a-1", "t99999999999999999999-a1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		task, attempt := parseGroupID(s)
		if task == -1 && attempt == -1 {
			return
		}
		// What parses must round-trip through the id's canonical form.
		id := fmt.Sprintf("t%d-a%d", task, attempt)
		if t2, a2 := parseGroupID(id); t2 != task || a2 != attempt {
			t.Fatalf("%q parsed as %d, %d; its canonical form %q as %d, %d", s, task, attempt, id, t2, a2)
		}
	})
}

// TestOracleMatchesLiveRun replays a small multi-turn workload through the
// oracle and through the reference schedule against a timed simulator over
// HTTP: both must see the same tokens, turns and delays.
func TestOracleMatchesLiveRun(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := Bench{Seed: 3, RepeatSeed: 100, TimeScale: 0.001, Capacity: 8, Concurrency: 16, EnvConcurrency: 16}
	w := Workload{Name: "t", Tasks: 6, N: 2, Preset: "agent", MinTurns: 1, MaxTurns: 3, EnvDelay: 100 * time.Millisecond,
		ObsTokens: 10, Keep: -1, MaxTokens: 32, BatchRollouts: 4}
	path := filepath.Join(dir, "tasks.jsonl")
	if err := WriteTasks(path, w.Tasks); err != nil {
		t.Fatal(err)
	}
	srv, err := StartSim(b.SimOptions(w))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg, err := b.Config(w, path, srv.URL, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := LoadTasks(ctx, cfg)
	if err != nil || len(tasks) != w.Tasks {
		t.Fatalf("LoadTasks: %d tasks, %v", len(tasks), err)
	}
	oracle, err := Oracle(ctx, b, w, cfg, tasks)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := openai.NewHTTP(cfg.Generate.Config, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	rec := NewRecorder(hc)
	env, err := SimEnv()
	if err != nil {
		t.Fatal(err)
	}
	before := srv.Stats()
	res, err := NewBarrier(cfg, rec, env).RunFixed(ctx, tasks, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.Batches != 3 || res.Rollouts != 12 {
		t.Errorf("reference: %+v, want 3 batches of 12 rollouts", res)
	}
	want, got := AllTrajs(oracle), rec.Trajs()
	if len(got) != len(want) || len(got) != 12 {
		t.Fatalf("%d live trajectories, %d in the oracle; want 12", len(got), len(want))
	}
	multi := false
	for i := range got {
		g, o := got[i], want[i]
		if g.TaskIndex != o.TaskIndex || g.Seed != o.Seed || len(g.Turns) != len(o.Turns) || !g.Finished || !o.Finished {
			t.Fatalf("trajectory %d: live %+v, oracle %+v", i, g, o)
		}
		for k := range g.Turns {
			if g.Turns[k] != o.Turns[k] {
				t.Errorf("trajectory %d turn %d: live %+v, oracle %+v", i, k, g.Turns[k], o.Turns[k])
			}
			if g.Turns[k].EnvDelay <= 0 {
				t.Errorf("trajectory %d turn %d: no env delay", i, k)
			}
		}
		multi = multi || len(g.Turns) > 1
	}
	if !multi {
		t.Error("no trajectory had more than one turn")
	}
	id := IdealOf(got, CostOf(srv.Options()))
	if d := Delta(before, srv.Stats()); d.DecodedTokens != id.D || d.PromptTokens != id.P {
		t.Errorf("server decoded %d and prefilled %d tokens; the trajectories say %d and %d", d.DecodedTokens, d.PromptTokens, id.D, id.P)
	}
	for _, g := range oracle {
		if len(g.Trajs) != w.N {
			t.Errorf("task %d: %d trajectories", g.Task, len(g.Trajs))
		}
	}
}

func TestFIFO(t *testing.T) {
	c := Cost{A: 1, C: 0, P: 0, B: 2}
	one := func(d ...int) *Traj {
		tr := &Traj{}
		for _, x := range d {
			tr.Turns = append(tr.Turns, Turn{Decode: x})
		}
		return tr
	}
	tests := []struct {
		name  string
		trajs []*Traj
		conc  int
		want  float64
	}{
		{"one request", []*Traj{one(3)}, 0, 3},
		{"fits the batch", []*Traj{one(3), one(5)}, 0, 5},
		// the third waits for the first slot (after 2 steps), then runs 4
		{"queued", []*Traj{one(2), one(5), one(4)}, 0, 6},
		// two turns: 2 steps, then 3 more
		{"turns", []*Traj{one(2, 3)}, 0, 5},
		// conc 1: strictly one after another
		{"client bound", []*Traj{one(2), one(2)}, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FIFO(tt.trajs, c, tt.conc).Seconds(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("FIFO = %g, want %g", got, tt.want)
			}
		})
	}
	// With delays: the env delay after the last turn counts.
	tr := &Traj{Turns: []Turn{{Decode: 1, EnvDelay: 500 * time.Millisecond}, {Decode: 1, EnvDelay: 250 * time.Millisecond}}}
	if got := FIFO([]*Traj{tr}, c, 0).Seconds(); math.Abs(got-2.75) > 1e-9 {
		t.Errorf("FIFO with delays = %g, want 2.75", got)
	}
}

func TestLongestFirst(t *testing.T) {
	c := Cost{A: 1, C: 0, P: 0, B: 2}
	one := func(d ...int) *Traj {
		tr := &Traj{}
		for _, x := range d {
			tr.Turns = append(tr.Turns, Turn{Decode: x})
		}
		return tr
	}
	for _, tt := range []struct {
		name       string
		trajs      []*Traj
		fifo, want float64
	}{
		// In order the long one waits 2 steps for a slot: 2 + 5. Longest
		// first starts it at once: 5, beside 2 then 2.
		{"a long one last", []*Traj{one(2), one(2), one(5)}, 7, 5},
		// Already longest first: the same makespan.
		{"sorted", []*Traj{one(5), one(2), one(2)}, 5, 5},
		// Lengths over all turns: the two-turn one (2+3) goes first.
		{"turns count", []*Traj{one(1), one(1), one(2, 3)}, 6, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := FIFO(tt.trajs, c, 0).Seconds(); math.Abs(got-tt.fifo) > 1e-9 {
				t.Errorf("FIFO = %g, want %g", got, tt.fifo)
			}
			if got := LongestFirst(tt.trajs, c, 0).Seconds(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("LongestFirst = %g, want %g", got, tt.want)
			}
		})
	}
}

func TestRandomOrder(t *testing.T) {
	c := Cost{A: 1, C: 0, P: 0, B: 1}
	g := func(task int64, d int) OracleGroup {
		return OracleGroup{Task: task, Trajs: []*Traj{{TaskIndex: task, Turns: []Turn{{Decode: d}}}}}
	}
	// One slot: every order takes the sum of the lengths.
	gs := []OracleGroup{g(0, 1), g(1, 2), g(2, 3)}
	if got := RandomOrder(gs, c, 0, 5, 1).Seconds(); math.Abs(got-6) > 1e-9 {
		t.Errorf("RandomOrder on one slot = %g, want 6", got)
	}
	// Two slots, lengths 1, 1, 4: 4 when the long one starts first
	// (orders 4·· and ·4·: 4 of 6), 5 when it comes last: mean 13/3 over
	// many rounds, within [4, 5] on any number of them.
	c.B = 2
	gs = []OracleGroup{g(0, 1), g(1, 1), g(2, 4)}
	if got := RandomOrder(gs, c, 0, 200, 1).Seconds(); got < 4 || got > 5 || math.Abs(got-13.0/3) > 0.15 {
		t.Errorf("RandomOrder = %g, want about 13/3", got)
	}
	if got := RandomOrder(nil, c, 0, 3, 1); got != 0 {
		t.Errorf("RandomOrder of nothing = %v", got)
	}
}

func TestFirstKept(t *testing.T) {
	c := Cost{A: 1, C: 0, P: 0, B: 16}
	// grp is a group of one trajectory per length, correct where ok says.
	grp := func(task int64, kept bool, lens []int, ok []bool) OracleGroup {
		g := OracleGroup{Task: task, Kept: kept}
		for i, d := range lens {
			g.Trajs = append(g.Trajs, &Traj{TaskIndex: task, Turns: []Turn{{Decode: d}}, Correct: ok[i]})
		}
		return g
	}
	gs := []OracleGroup{
		grp(0, true, []int{2, 3, 10}, []bool{true, false, false}), // kept, decided at 3, done at 10
		grp(1, false, []int{3, 3}, []bool{true, true}),            // dropped
		grp(2, true, []int{1, 4}, []bool{false, true}),            // kept, done at 4
		grp(3, false, []int{6, 9}, []bool{true, true}),            // dropped, undecided until 9
	}
	for _, tt := range []struct {
		name    string
		target  int
		cancel  Cancel
		t       float64
		decoded int64
		kept    int
	}{
		// Group 2 finishes first (step 4): target 1 stops there, every
		// request still running having decoded 4 tokens.
		{"first kept to finish", 1, Cancel{}, 4, 2 + 3 + 4 + 3 + 3 + 1 + 4 + 4 + 4, 1},
		// Target 2 waits for group 0 (step 10), group 3 runs to 9.
		{"second", 2, Cancel{}, 10, 2 + 3 + 10 + 3 + 3 + 1 + 4 + 6 + 9, 2},
		// With cancel: at step 3 group 0 is decided; at step 4 group 2
		// finishes kept: kept 1 + decided 1 hold 2, and group 3 (nothing
		// finished) is dropped after 4 tokens of each member.
		{"cancel undecided", 2, Cancel{On: true}, 10, 2 + 3 + 10 + 3 + 3 + 1 + 4 + 4 + 4, 2},
		// With one spare: kept 1 + decided 1 do not hold 3, and the
		// undecided group 3 runs to its end.
		{"cancel undecided, one spare", 2, Cancel{On: true, Spare: 1}, 10, 2 + 3 + 10 + 3 + 3 + 1 + 4 + 6 + 9, 2},
		// More than the groups hold: all of them run, kept short.
		{"short", 3, Cancel{}, 10, 2 + 3 + 10 + 3 + 3 + 1 + 4 + 6 + 9, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := FirstKept(gs, tt.target, c, 0, tt.cancel)
			if math.Abs(st.T.Seconds()-tt.t) > 1e-9 || st.Decoded != tt.decoded || st.Kept != tt.kept {
				t.Errorf("FirstKept = T %g, decoded %d, kept %d; want %g, %d, %d", st.T.Seconds(), st.Decoded, st.Kept, tt.t, tt.decoded, tt.kept)
			}
		})
	}
}
