package metrics

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestPassAtK(t *testing.T) {
	tests := []struct {
		n, c, k       int
		pass, passHat float64
	}{
		{4, 1, 2, 1 - 3.0/6, 0},             // C(3,2)/C(4,2) = 3/6
		{4, 2, 2, 1 - 1.0/6, 1.0 / 6},       // C(2,2)/C(4,2)
		{4, 4, 4, 1, 1},                     // all correct
		{4, 0, 1, 0, 0},                     // none correct
		{4, 0, 4, 0, 0},                     //
		{5, 2, 1, 0.4, 0.4},                 // k = 1 is c/n
		{8, 3, 4, 1 - 5.0/70, 0},            // C(5,4)/C(8,4) = 5/70
		{8, 6, 4, 1, 15.0 / 70},             // C(2,4) = 0; C(6,4)/C(8,4) = 15/70
		{3, 2, 2, 1, 1.0 / 3},               // C(1,2) = 0; C(2,2)/C(3,2)
		{1000, 1, 500, 0.5, 0},              // C(999,500)/C(1000,500) = 500/1000; factorials overflow
		{1000, 999, 500, 1, 0.5},            // C(999,500)/C(1000,500)
		{4, 1, 5, 0, 0},                     // k > n
		{4, 1, 0, 0, 0},                     // k < 1
		{2, 3, 1, 0, 0},                     // c > n is invalid
		{16, 8, 16, 1, 0},                   //
		{16, 16, 16, 1, 1},                  //
		{6, 3, 3, 1 - 1.0/20, 1.0 / 20},     // C(3,3)/C(6,3) = 1/20
		{10, 4, 3, 1 - 20.0/120, 4.0 / 120}, // C(6,3)/C(10,3), C(4,3)/C(10,3)
	}
	for _, tt := range tests {
		if got := PassAtK(tt.n, tt.c, tt.k); !near(got, tt.pass) {
			t.Errorf("PassAtK(n=%d, c=%d, k=%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.pass)
		}
		if got := PassHatK(tt.n, tt.c, tt.k); !near(got, tt.passHat) {
			t.Errorf("PassHatK(n=%d, c=%d, k=%d) = %v, want %v", tt.n, tt.c, tt.k, got, tt.passHat)
		}
	}
}

// row builds a rollout of run "r".
func row(task int64, attempt int, status pipeline.Status, reward float64, metrics map[string]float64) *pipeline.Rollout {
	return &pipeline.Rollout{
		RunID: "r", Task: &pipeline.Task{Index: task}, Attempt: attempt,
		Status: status, Reward: reward, Metrics: metrics, Kept: true,
	}
}

func acc(v float64) map[string]float64 { return map[string]float64{"acc": v} }

// fixture: task 0 has 4 ok samples (acc 1,0,0,0); task 1 has 2 filtered
// samples without acc (rewards 1, 0.5: both correct by reward); task 2 has
// 3 ok samples (acc 1,1,0) in attempt 0 and one error in attempt 1.
func fixture() []*pipeline.Rollout {
	rs := []*pipeline.Rollout{
		row(0, 0, pipeline.StatusOK, 1, acc(1)),
		row(0, 0, pipeline.StatusOK, 0, acc(0)),
		row(0, 0, pipeline.StatusOK, 0, acc(0)),
		row(0, 0, pipeline.StatusOK, 0, acc(0)),
		row(1, 0, pipeline.StatusFiltered, 1, nil),
		row(1, 0, pipeline.StatusFiltered, 0.5, nil),
		row(2, 0, pipeline.StatusOK, 1, acc(1)),
		row(2, 0, pipeline.StatusOK, 1, acc(1)),
		row(2, 0, pipeline.StatusOK, 0, acc(0)),
		row(2, 1, pipeline.StatusError, 0, nil),
	}
	rs[4].Kept, rs[4].FilterReason = false, "zero_std"
	rs[5].Kept, rs[5].FilterReason = false, "zero_std"
	rs[9].Kept = false
	for i, r := range rs {
		r.CompletionTokens = 100 * (i + 1)
		r.PromptTokens = 7
		r.EnvTokens = i % 3
		r.NumTurns = i + 1
		r.ToolCalls = i % 2
		r.TokenContinuityBreaks = i % 4 / 3 // rows 3 and 7
		r.Terminated = i%3 != 0             // rows 1,2,4,5,7,8 (scored)
		r.Truncated = i == 2
		r.MaxTurnsReached = i == 0 || i == 3 || i == 6
	}
	return rs
}

func TestAggregator(t *testing.T) {
	a := New()
	for _, r := range fixture() {
		a.Add(r)
	}
	a.Add(nil) // ignored
	m := a.Result()

	want := &Metrics{
		Rows:       10,
		Status:     map[string]int64{"ok": 7, "filtered": 2, "error": 1},
		ScoredRows: 9,
		Reward:     Moments{N: 9, Mean: 0.5, Std: math.Sqrt(2) / 3, Min: 0, Max: 1},
		Correctness: Correctness{
			Metric: "acc", MetricRows: 7, RewardRows: 2, Correct: 5, Accuracy: 5.0 / 9,
		},
		Tasks: 3, TasksComplete: 2, TaskCompletion: 2.0 / 3,
		AtK: []AtK{
			{K: 1, Tasks: 3, PassAtK: (0.25 + 1 + 2.0/3) / 3, PassHatK: (0.25 + 1 + 2.0/3) / 3, MeanAtK: (0.25 + 1 + 2.0/3) / 3},
			{K: 2, Tasks: 3, PassAtK: (0.5 + 1 + 1) / 3, PassHatK: (0 + 1 + 1.0/3) / 3, MeanAtK: (0.25 + 1 + 2.0/3) / 3},
			{K: 4, Tasks: 1, PassAtK: 1, PassHatK: 0, MeanAtK: 0.25},
		},
		Tokens: Tokens{
			Prompt:     Dist{Total: 70, Mean: 7, Max: 7, P95: 7},
			Completion: Dist{Total: 5500, Mean: 550, Max: 1000, P95: 1000},
			Env:        &Dist{Total: 9, Mean: 0.9, Max: 2, P95: 2},
		},
		Turns:                        Dist{Total: 55, Mean: 5.5, Max: 10, P95: 10},
		ToolCalls:                    Dist{Total: 5, Mean: 0.5, Max: 1, P95: 1},
		ScoredNaturalTerminationRate: 5.0 / 9, // rows 1,4,5,7,8 (row 2 truncated)
		ScoredTruncationRate:         1.0 / 9,
		MaxTurnsRate:                 3.0 / 9,
		TokenContinuityBreaks:        2,
		Groups: Groups{Count: 4, Kept: 2, Dropped: 2,
			DroppedBy: map[string]int64{"zero_std": 1, UnspecifiedReason: 1}},
	}
	checkMetrics(t, m, want)
}

// checkMetrics compares float fields with a tolerance and the rest exactly.
func checkMetrics(t *testing.T, got, want *Metrics) {
	t.Helper()
	g, w := *got, *want
	floats := func(m *Metrics) []*float64 {
		fs := []*float64{&m.Reward.Mean, &m.Reward.Std, &m.Correctness.Accuracy, &m.TaskCompletion,
			&m.Tokens.Prompt.Mean, &m.Tokens.Completion.Mean, &m.Turns.Mean, &m.ToolCalls.Mean,
			&m.ScoredNaturalTerminationRate, &m.ScoredTruncationRate, &m.MaxTurnsRate}
		if m.Tokens.Env != nil {
			env := *m.Tokens.Env // a copy: the comparison zeroes it
			m.Tokens.Env = &env
			fs = append(fs, &env.Mean)
		}
		for i := range m.AtK {
			fs = append(fs, &m.AtK[i].PassAtK, &m.AtK[i].PassHatK, &m.AtK[i].MeanAtK)
		}
		return fs
	}
	g.AtK = append([]AtK(nil), g.AtK...)
	w.AtK = append([]AtK(nil), w.AtK...)
	// The NeMo RL metrics, per-turn and per-env breakdowns have tests of
	// their own (nemorl_test.go); a want without them ignores them.
	if w.NeMoRL == (NeMoRL{}) {
		g.NeMoRL = NeMoRL{}
	}
	if w.PerTurn == nil {
		g.PerTurn = nil
	}
	if w.Envs != nil {
		if len(g.Envs) != len(w.Envs) {
			t.Errorf("%d envs, want %d", len(g.Envs), len(w.Envs))
		}
		for n, we := range w.Envs {
			if ge := g.Envs[n]; ge != nil {
				checkMetrics(t, ge, we)
			}
		}
	}
	g.Envs, w.Envs = nil, nil
	gf, wf := floats(&g), floats(&w)
	if len(gf) == len(wf) {
		for i := range gf {
			if !near(*gf[i], *wf[i]) {
				t.Errorf("float field %d = %v, want %v", i, *gf[i], *wf[i])
			}
			*gf[i], *wf[i] = 0, 0
		}
	}
	if !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(got, "", " ")
		wj, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("metrics:\n%s\nwant:\n%s", gj, wj)
	}
}

func TestCorrectnessOptions(t *testing.T) {
	rows := []*pipeline.Rollout{
		row(0, 0, pipeline.StatusOK, 0.2, map[string]float64{"acc": 0, "score": 0.9}),
		row(0, 0, pipeline.StatusOK, 0.8, map[string]float64{"acc": 1, "score": 0.4}),
		row(0, 0, pipeline.StatusOK, 0.6, nil),
	}
	tests := []struct {
		opts           Options
		correct        int64
		metric, reward int64
	}{
		{Options{}, 2, 2, 1}, // acc 0,1; reward 0.6 > 0
		{Options{Metric: "score", Threshold: 0.5}, 2, 2, 1},   // score 0.9; reward 0.6 (no score)
		{Options{UseReward: true, Threshold: 0.5}, 2, 0, 3},   // 0.8, 0.6
		{Options{Metric: "missing", Threshold: 0.7}, 1, 0, 3}, // reward 0.8 only
	}
	for _, tt := range tests {
		a := NewWithOptions(tt.opts)
		for _, r := range rows {
			a.Add(r)
		}
		c := a.Result().Correctness
		if c.Correct != tt.correct || c.MetricRows != tt.metric || c.RewardRows != tt.reward {
			t.Errorf("%+v: correct %d metric rows %d reward rows %d, want %d %d %d",
				tt.opts, c.Correct, c.MetricRows, c.RewardRows, tt.correct, tt.metric, tt.reward)
		}
	}
}

func TestEmpty(t *testing.T) {
	m := New().Result()
	if m.Rows != 0 || len(m.AtK) != 0 || m.Reward != (Moments{}) || m.TaskCompletion != 0 {
		t.Errorf("empty: %+v", m)
	}
	if _, err := json.Marshal(m); err != nil {
		t.Errorf("empty metrics do not encode: %v", err)
	}
}

func TestAtKPowersOfTwo(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want []int
	}{{1, []int{1}}, {2, []int{1, 2}}, {3, []int{1, 2}}, {7, []int{1, 2, 4}}, {8, []int{1, 2, 4, 8}}, {9, []int{1, 2, 4, 8}}} {
		a := New()
		for i := range tt.n {
			a.Add(row(0, 0, pipeline.StatusOK, float64(i%2), nil))
		}
		var ks []int
		for _, at := range a.Result().AtK {
			ks = append(ks, at.K)
		}
		if !reflect.DeepEqual(ks, tt.want) {
			t.Errorf("n=%d: k = %v, want %v", tt.n, ks, tt.want)
		}
	}
}

// Tasks of different runs are different tasks; attempts of one task pool.
func TestTaskKeys(t *testing.T) {
	a := New()
	r1 := row(0, 0, pipeline.StatusOK, 1, nil)
	r2 := row(0, 1, pipeline.StatusOK, 0, nil)
	r3 := row(0, 0, pipeline.StatusOK, 0, nil)
	r3.RunID = "other"
	for _, r := range []*pipeline.Rollout{r1, r2, r3} {
		a.Add(r)
	}
	m := a.Result()
	if m.Tasks != 2 || m.Groups.Count != 3 {
		t.Fatalf("tasks %d groups %d, want 2 and 3", m.Tasks, m.Groups.Count)
	}
	// Task (r, 0): n=2 c=1; task (other, 0): n=1 c=0.
	if got := m.AtK[0].PassAtK; !near(got, 0.25) {
		t.Errorf("pass@1 = %v, want 0.25", got)
	}
	if len(m.AtK) != 2 || m.AtK[1].Tasks != 1 || !near(m.AtK[1].PassAtK, 1) {
		t.Errorf("at k=2: %+v", m.AtK)
	}
}

// The result does not depend on the order of the rows (up to rounding).
func TestOrderIndependent(t *testing.T) {
	rs := fixture()
	a := New()
	for _, r := range rs {
		a.Add(r)
	}
	want := a.Result()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		b := New()
		for _, r := range rs {
			b.Add(r)
		}
		checkMetrics(t, b.Result(), want)
	}
}

// Past 63 distinct filter reasons the rest count under "other": every
// dropped group is counted once, under its own reason or "other", never
// under another reason (the 64th and later reasons overflowed the
// reason's 6 bits and were counted under the first).
func TestManyFilterReasons(t *testing.T) {
	a := New()
	const reasons = 100
	for i := range reasons {
		r := row(int64(i), 0, pipeline.StatusFiltered, 0, nil)
		r.Kept, r.FilterReason = false, fmt.Sprintf("reason_%03d", i)
		a.Add(r)
	}
	got := a.Result().Groups.DroppedBy
	total := int64(0)
	for reason, n := range got {
		total += n
		if reason != "other" && n != 1 {
			t.Errorf("dropped_by[%s] = %d, want 1", reason, n)
		}
	}
	if total != reasons || got["other"] != reasons-maxReason {
		t.Fatalf("dropped_by: %d groups, %d under other; want %d, %d", total, got["other"], reasons, reasons-maxReason)
	}
}

// Add keeps no reference to the rollout's strings.
func TestAddCopiesStrings(t *testing.T) {
	buf := []byte("run-a")
	reason := []byte("zero_std")
	r := row(0, 0, pipeline.StatusFiltered, 0, nil)
	r.RunID, r.Kept, r.FilterReason = string(buf), false, string(reason)
	a := New()
	a.Add(r)
	r.RunID, r.FilterReason = "changed", "changed"
	if a.Result().Groups.DroppedBy["zero_std"] != 1 {
		t.Errorf("dropped_by = %v", a.Result().Groups.DroppedBy)
	}
}

func TestBuckets(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<20; v += 1 + v/1000 {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucketOf(%d) = %d < previous %d", v, b, prev)
		}
		prev = b
		hi := bucketMax(b)
		lo := int64(0)
		if b > 0 {
			lo = bucketMax(b-1) + 1
		}
		if v < lo || v > hi {
			t.Fatalf("v=%d in bucket %d = [%d, %d]", v, b, lo, hi)
		}
		if v < exactBuckets && lo != hi {
			t.Fatalf("v=%d: bucket [%d, %d] not exact", v, lo, hi)
		}
		if float64(hi-lo+1) > float64(lo)/subBuckets+1 {
			t.Fatalf("bucket %d = [%d, %d] wider than 1/%d", b, lo, hi, subBuckets)
		}
	}
	if b := bucketOf(math.MaxInt64); bucketMax(b) != math.MaxInt64 {
		t.Errorf("max int64 bucket %d tops at %d", b, bucketMax(b))
	}
}

func TestQuantile(t *testing.T) {
	tests := []struct {
		vals []int64
		q    float64
		want int64
	}{
		{nil, 0.95, 0},
		{[]int64{5}, 0.95, 5},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 0.95, 19}, // rank 19
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.95, 10},                                         // rank ceil(9.5)
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5, 5},                                           // rank 5
		{[]int64{-3, 0}, 0.5, 0},                                                                   // negatives count as 0
		{[]int64{1000, 1001, 1005}, 0.5, 1003},                                                     // bucket [1000,1003]
		{[]int64{1000, 1001, 1002}, 1, 1002},                                                       // capped at the max
	}
	for _, tt := range tests {
		var d dist
		for _, v := range tt.vals {
			d.add(v)
		}
		if got := d.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v, %v) = %d, want %d", tt.vals, tt.q, got, tt.want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	a := New()
	for _, r := range fixture() {
		a.Add(r)
	}
	m := a.Result()
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Metrics
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if !reflect.DeepEqual(&back, m) {
		t.Errorf("read back %+v, want %+v", back, *m)
	}
	if data[0] != '{' || data[1] != '\n' || data[len(data)-1] != '\n' {
		t.Errorf("not indented JSON with a final newline: %q", data[:10])
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only metrics.json", len(entries))
	}
	if err := m.WriteFile(filepath.Join(dir, "missing", "m.json")); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestNeMoRLTerminationRates: natural_termination_rate counts every row
// done by termination or truncation, as NeMo RL's batched loop's
// sample_terminated |= truncated | terminated; a row truncated without
// termination counts. max_turns_reached_rate counts the max_turns_reached
// rows, terminated ones included.
func TestNeMoRLTerminationRates(t *testing.T) {
	a := New()
	for _, r := range []*pipeline.Rollout{
		{Status: pipeline.StatusOK, NumTurns: 1, Terminated: true},
		{Status: pipeline.StatusOK, NumTurns: 2, Truncated: true},
		{Status: pipeline.StatusOK, NumTurns: 3, Terminated: true, MaxTurnsReached: true},
		{Status: pipeline.StatusOK, NumTurns: 3, MaxTurnsReached: true},
	} {
		r.Task = &pipeline.Task{}
		a.Add(r)
	}
	m := a.Result()
	if m.NaturalTerminationRate != 0.75 || m.TruncationRate != 0.25 || m.MaxTurnsReachedRate != 0.5 {
		t.Fatalf("natural %v truncation %v max turns %v, want 0.75 0.25 0.5", m.NaturalTerminationRate, m.TruncationRate, m.MaxTurnsReachedRate)
	}
}

// TestNonFiniteRewards: rewards that are not finite or too large to square
// are left out of the moments and counted; the metrics still encode as
// JSON and print.
func TestNonFiniteRewards(t *testing.T) {
	a := New()
	for i, v := range []float64{1, math.NaN(), 1e308, math.Inf(-1), 3, -1.7e308} {
		a.Add(&pipeline.Rollout{Task: &pipeline.Task{Index: int64(i)}, Status: pipeline.StatusOK, Reward: v})
	}
	m := a.Result()
	if m.RewardsSkipped != 4 || m.Reward.N != 2 || m.Reward.Mean != 2 || m.Reward.Std != 1 || m.Reward.Max != 3 {
		t.Fatalf("skipped %d, moments %+v", m.RewardsSkipped, m.Reward)
	}
	if _, err := json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := m.WriteText(&b); err != nil || !strings.Contains(b.String(), "rewards skipped") {
		t.Fatalf("%v\n%s", err, b.String())
	}
}

// Rows whose training-view counts are unknown (a reply came without token
// ids) are left out of the NeMo RL means, the env tokens and the per-turn
// generated tokens, and counted; a figure no known row makes is null,
// never 0. The servers' usage still counts them.
func TestUnknownTrainingViewCounts(t *testing.T) {
	known := func(gen, env int) *pipeline.Rollout {
		mask := make([]int8, gen+env)
		for i := range gen {
			mask[i] = 1
		}
		return &pipeline.Rollout{Task: &pipeline.Task{Index: 0}, Status: pipeline.StatusOK, NumTurns: 1,
			PromptTokens: 10, CompletionTokens: gen, EnvTokens: env, PromptTokenIDs: make([]int32, 10),
			ResponseTokenIDs: make([]int32, gen+env), LossMask: mask,
			Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1, TokenStart: 10, TokenEnd: int32(10 + gen)}}}
	}
	unknown := func(completion int) *pipeline.Rollout {
		return &pipeline.Rollout{Task: &pipeline.Task{Index: 1}, Status: pipeline.StatusOK, NumTurns: 1,
			PromptTokens: 10, CompletionTokens: completion, TokenIDsMissing: true,
			Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1}}}
	}
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	tests := []struct {
		name            string
		rows            []*pipeline.Rollout
		gen, env, total *float64
		unknown         int64
		turn1           *int64
		completionTotal int64
		text, textNot   string
	}{
		{"all known", []*pipeline.Rollout{known(4, 2), known(2, 0)}, f(3), f(1), f(4), 0, i(6), 6,
			"tokens per sample gen 3.00  env 1.00  total 4.00", "unknown"},
		{"all unknown", []*pipeline.Rollout{unknown(64), unknown(32)}, nil, nil, nil, 2, nil, 96,
			"tokens per sample gen unknown  env unknown  total unknown (2 of 2 rows unknown", "gen 0.00"},
		{"mixed", []*pipeline.Rollout{known(4, 2), unknown(64)}, f(4), f(2), f(6), 1, i(4), 68,
			"tokens per sample gen 4.00  env 2.00  total 6.00 (1 of 2 rows unknown", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New()
			for _, r := range tt.rows {
				a.Add(r)
			}
			m := a.Result()
			eq := func(name string, got, want *float64) {
				if (got == nil) != (want == nil) || got != nil && !near(*got, *want) {
					t.Errorf("%s = %v, want %v", name, deref(got), deref(want))
				}
			}
			eq("mean_gen_tokens_per_sample", m.MeanGenTokensPerSample, tt.gen)
			eq("mean_env_tokens_per_sample", m.MeanEnvTokensPerSample, tt.env)
			eq("mean_total_tokens_per_sample", m.MeanTotalTokensPerSample, tt.total)
			if m.TokenCountsUnknown != tt.unknown {
				t.Errorf("token_counts_unknown = %d, want %d", m.TokenCountsUnknown, tt.unknown)
			}
			if (m.Tokens.Env == nil) != (tt.env == nil) {
				t.Errorf("tokens.env = %v", m.Tokens.Env)
			}
			if m.Tokens.Completion.Total != tt.completionTotal {
				t.Errorf("completion tokens = %d, want %d (usage, every row)", m.Tokens.Completion.Total, tt.completionTotal)
			}
			if len(m.PerTurn) != 1 || (m.PerTurn[0].GenTokens == nil) != (tt.turn1 == nil) ||
				tt.turn1 != nil && *m.PerTurn[0].GenTokens != *tt.turn1 || m.PerTurn[0].UnknownSamples != tt.unknown {
				t.Errorf("per_turn = %+v, want gen_tokens %v, unknown_samples %d", m.PerTurn, tt.turn1, tt.unknown)
			}
			var b strings.Builder
			if err := m.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.text) || tt.textNot != "" && strings.Contains(b.String(), tt.textNot) {
				t.Errorf("text lacks %q (or holds %q):\n%s", tt.text, tt.textNot, b.String())
			}
			data, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if tt.gen == nil && !strings.Contains(string(data), `"mean_gen_tokens_per_sample":null`) {
				t.Errorf("JSON does not say null: %s", data)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
