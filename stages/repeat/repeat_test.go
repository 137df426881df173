package repeat

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

func TestOffsetSeeds(t *testing.T) {
	e := New(Config{N: 4, Seed: 1000, SeedMode: "offset"}, "run", "math", "m")
	tests := []struct {
		task             int64
		attempt, rollout int
		want             int64
	}{
		{0, 0, 0, 1000},
		{0, 0, 3, 1003}, // NeMo Gym: seed + rollout index
		{17, 0, 2, 1002},
		{17, 1, 0, 1004}, // attempts shifted by n
		{17, 2, 3, 1011},
	}
	for _, tt := range tests {
		if got := e.Seed(tt.task, tt.attempt, tt.rollout); got != tt.want {
			t.Errorf("Seed(%d, %d, %d) = %d, want %d", tt.task, tt.attempt, tt.rollout, got, tt.want)
		}
	}
}

func TestHashSeeds(t *testing.T) {
	e := New(Config{N: 4, Seed: 1234, SeedMode: "hash"}, "run", "math", "m")
	// Pinned values: a resumed run, or a later version, must draw the same seeds.
	golden := []struct {
		task             int64
		attempt, rollout int
		want             int64
	}{
		{0, 0, 0, 2763386416736595716},
		{0, 0, 1, 2803013942857000828},
		{17, 0, 3, 8954776949509960126},
		{17, 2, 0, 9209195769151158410},
		{1000000, 5, 7, 332405845202730361},
	}
	for _, g := range golden {
		if got := e.Seed(g.task, g.attempt, g.rollout); got != g.want {
			t.Errorf("Seed(%d, %d, %d) = %d, want %d", g.task, g.attempt, g.rollout, got, g.want)
		}
	}
	seen := map[int64]string{}
	for task := int64(0); task < 50; task++ {
		for attempt := range 3 {
			for r := range 4 {
				s := e.Seed(task, attempt, r)
				if s < 0 {
					t.Fatalf("negative seed %d", s)
				}
				if s != e.Seed(task, attempt, r) {
					t.Fatal("seed not deterministic")
				}
				key := GroupID(task, attempt)
				if prev, dup := seen[s]; dup {
					t.Fatalf("seed %d of %s-r%d repeats %s", s, key, r, prev)
				}
				seen[s] = key
			}
		}
	}
	other := New(Config{N: 4, Seed: 1235, SeedMode: "hash"}, "", "", "")
	if other.Seed(0, 0, 0) == e.Seed(0, 0, 0) {
		t.Error("base seed does not change hash seeds")
	}
}

func TestExpand(t *testing.T) {
	task := &pipeline.Task{Index: 17, Messages: []pipeline.Message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: "u", ToolCalls: []pipeline.ToolCall{{ID: "c"}}},
	}}
	e := New(Config{N: 3, Seed: 10, SeedMode: "offset"}, "run1", "math", "qwen")
	got := e.Expand(task, 1)
	if len(got) != 3 {
		t.Fatalf("%d rollouts, want 3", len(got))
	}
	for i, r := range got {
		want := pipeline.Rollout{
			RunID: "run1", Task: task, Attempt: 1, RolloutIndex: i, GroupSize: 3,
			GroupID: "t17-a1", TrajID: "t17-a1-r" + string(rune('0'+i)), Seed: int64(13 + i),
			Env: "math", Model: "qwen", Messages: task.Messages,
		}
		if !reflect.DeepEqual(*r, want) {
			t.Errorf("rollout %d = %+v\nwant %+v", i, *r, want)
		}
		if r.Key() != (pipeline.Key{TaskIndex: 17, Attempt: 1, RolloutIndex: i}) {
			t.Errorf("key %+v", r.Key())
		}
	}
	// Each rollout owns its messages.
	got[0].Messages[1].Content = "changed"
	got[0].Messages[1].ToolCalls[0].ID = "x"
	got[0].Messages = append(got[0].Messages, pipeline.Message{Role: "assistant"})
	if task.Messages[1].Content != "u" || task.Messages[1].ToolCalls[0].ID != "c" || got[1].Messages[1].Content != "u" {
		t.Error("rollouts share messages with the task or each other")
	}
	if len(got[1].Messages) != 2 {
		t.Error("append leaked into a sibling")
	}
}

func TestNDefaultsToOne(t *testing.T) {
	e := New(Config{}, "", "", "")
	rs := e.Expand(&pipeline.Task{Index: 2}, 0)
	if len(rs) != 1 || rs[0].GroupSize != 1 || rs[0].Seed != 0 || rs[0].Messages != nil {
		t.Fatalf("rollouts %+v", rs)
	}
}

// BenchmarkExpandAndReply is a group's expansion plus each rollout's first
// reply appended to its messages (as the generate stage does).
func BenchmarkExpandAndReply(b *testing.B) {
	task := &pipeline.Task{Index: 17, Messages: []pipeline.Message{{Role: "user", Content: "u"}}}
	e := New(Config{N: 4, Seed: 10, SeedMode: "offset"}, "run1", "math", "qwen")
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range e.Expand(task, 0) {
			r.Messages = append(r.Messages, pipeline.Message{Role: "assistant"})
		}
	}
}

func TestRetrySeed(t *testing.T) {
	seen := map[int64]bool{}
	for _, seed := range []int64{0, 1, 1234, -7} {
		seen[seed] = true
	}
	for _, seed := range []int64{0, 1, 1234, -7} {
		for retry := 1; retry <= 3; retry++ {
			s := RetrySeed(seed, retry)
			if s != RetrySeed(seed, retry) {
				t.Fatalf("RetrySeed(%d, %d) is not deterministic", seed, retry)
			}
			if s < 0 || seen[s] {
				t.Fatalf("RetrySeed(%d, %d) = %d: negative or repeats an earlier seed", seed, retry, s)
			}
			seen[s] = true
		}
	}
}

// TestRowSeed checks which row params count as the row's own seed, and that
// Expand keeps it unless override_row_seed is set.
func TestRowSeed(t *testing.T) {
	tests := []struct {
		name     string
		params   map[string]any
		override bool
		want     []int64 // the seeds of rollouts 0..2
	}{
		{"no row seed", nil, false, []int64{100, 101, 102}},
		{"json number kept", map[string]any{"seed": json.Number("7")}, false, []int64{7, 7, 7}},
		{"float kept", map[string]any{"seed": 7.0}, false, []int64{7, 7, 7}},
		{"int kept", map[string]any{"seed": 9}, false, []int64{9, 9, 9}},
		{"zero kept", map[string]any{"seed": json.Number("0")}, false, []int64{0, 0, 0}},
		{"overridden", map[string]any{"seed": json.Number("7")}, true, []int64{100, 101, 102}},
		{"null is no seed", map[string]any{"seed": nil}, false, []int64{100, 101, 102}},
		{"non-integer is no seed", map[string]any{"seed": json.Number("1.5")}, false, []int64{100, 101, 102}},
		{"string is no seed", map[string]any{"seed": "7"}, false, []int64{100, 101, 102}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(Config{N: 3, Seed: 100, SeedMode: SeedOffset, OverrideRowSeed: tt.override}, "run", "math", "m")
			var got []int64
			for _, r := range e.Expand(&pipeline.Task{Index: 4, Params: tt.params}, 0) {
				got = append(got, r.Seed)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("seeds = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOverrideRowSeedYAML(t *testing.T) {
	var c Config
	if err := yaml.Unmarshal([]byte("n: 2\noverride_row_seed: true\n"), &c); err != nil {
		t.Fatal(err)
	}
	if !c.OverrideRowSeed {
		t.Error("override_row_seed not read")
	}
}

// TestSeedConfigured checks when a seed counts as configured (distinguishing
// an unset seed from seed: 0), and that Expand marks rollouts with no seed
// to send.
func TestSeedConfigured(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string // decoded when not empty
		cfg    Config // else used as is
		set    bool   // call SetSeed(0) on cfg
		params map[string]any
		want   bool // a seed is sent
	}{
		{"yaml: seed left out", "n: 2\n", Config{}, false, nil, false},
		{"yaml: seed: 0", "n: 2\nseed: 0\n", Config{}, false, nil, true},
		{"yaml: seed: 7", "seed: 7\n", Config{}, false, nil, true},
		{"go: zero Seed", "", Config{N: 2}, false, nil, false},
		{"go: non-zero Seed", "", Config{N: 2, Seed: 3}, false, nil, true},
		{"go: SetSeed(0)", "", Config{N: 2}, true, nil, true},
		{"unset, row's own seed", "", Config{N: 2}, false, map[string]any{"seed": 4}, true},
		{"unset, row seed overridden", "", Config{N: 2, OverrideRowSeed: true}, false, map[string]any{"seed": 4}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			if tt.yaml != "" {
				if err := yaml.Unmarshal([]byte(tt.yaml), &c); err != nil {
					t.Fatal(err)
				}
			}
			if tt.set {
				c.SetSeed(0)
			}
			c.SetDefaults()
			for _, r := range New(c, "run", "math", "m").Expand(&pipeline.Task{Params: tt.params}, 0) {
				if r.NoSeed == tt.want {
					t.Errorf("rollout %d: NoSeed %v, want a seed sent: %v", r.RolloutIndex, r.NoSeed, tt.want)
				}
			}
		})
	}
}

// Every rollout starts with its row's own stop strings, a copy of them.
func TestExpandStopStrings(t *testing.T) {
	e := New(Config{N: 2}, "run", "math", "m")
	task := &pipeline.Task{Index: 3, StopStrings: []string{"</answer>"}}
	rs := e.Expand(task, 0)
	for _, r := range rs {
		if len(r.StopStrings) != 1 || r.StopStrings[0] != "</answer>" {
			t.Fatalf("rollout %d: stop strings %v", r.RolloutIndex, r.StopStrings)
		}
	}
	rs[0].StopStrings[0] = "changed"
	if task.StopStrings[0] != "</answer>" || rs[1].StopStrings[0] != "</answer>" {
		t.Fatal("rollouts share the row's stop strings")
	}
}
