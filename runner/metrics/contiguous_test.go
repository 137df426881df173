package metrics

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// contiguousRows is a run of many tasks with several attempts, statuses,
// drop reasons and runs, its rows grouped by task but the tasks in a
// shuffled order.
func contiguousRows(seed uint64) []*pipeline.Rollout {
	rng := rand.New(rand.NewPCG(seed, 7))
	statuses := []pipeline.Status{pipeline.StatusOK, pipeline.StatusOK, pipeline.StatusFiltered, pipeline.StatusError, pipeline.StatusCancelled, ""}
	reasons := []string{"", "zero_std", "too_long"}
	type task struct {
		run   string
		index int64
	}
	var tasks []task
	for _, run := range []string{"a", "b"} {
		for i := range 300 {
			tasks = append(tasks, task{run, int64(i * (1 + rng.IntN(3)))})
		}
	}
	// Distinct keys only.
	seen := map[task]bool{}
	var keys []task
	for _, t := range tasks {
		if !seen[t] {
			seen[t] = true
			keys = append(keys, t)
		}
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	var rs []*pipeline.Rollout
	for _, t := range keys {
		for attempt := range 1 + rng.IntN(3) {
			kept := rng.IntN(2) == 0
			reason := reasons[rng.IntN(len(reasons))]
			for range 1 + rng.IntN(8) {
				r := row(t.index, attempt, statuses[rng.IntN(len(statuses))], float64(rng.IntN(3))/2, nil)
				r.RunID = t.run
				if rng.IntN(2) == 0 {
					r.Metrics = acc(float64(rng.IntN(2)))
				}
				r.Kept, r.FilterReason = kept, reason
				if kept {
					r.FilterReason = ""
				}
				r.CompletionTokens = rng.IntN(500)
				rs = append(rs, r)
			}
		}
	}
	return rs
}

func aggregate(opts Options, rs []*pipeline.Rollout) *Aggregator {
	a := NewWithOptions(opts)
	for _, r := range rs {
		a.Add(r)
	}
	return a
}

// With contiguous rows, Options.Contiguous gives exactly (bit for bit) the
// metrics of the default mode.
func TestContiguousEqualsDefault(t *testing.T) {
	for seed := range uint64(5) {
		rs := contiguousRows(seed)
		want := aggregate(Options{}, rs).Result()
		a := aggregate(Options{Contiguous: true}, rs)
		if err := a.Err(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		got := a.Result()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("seed %d: contiguous\n%+v\nwant\n%+v", seed, got, want)
		}
		if got.Tasks < 100 || got.Groups.Dropped == 0 || len(got.AtK) < 3 {
			t.Errorf("seed %d: fixture too thin: %+v", seed, got)
		}
	}
	// And on the hand-made fixture.
	want := aggregate(Options{}, fixture()).Result()
	if got := aggregate(Options{Contiguous: true}, fixture()).Result(); !reflect.DeepEqual(got, want) {
		t.Errorf("fixture: contiguous\n%+v\nwant\n%+v", got, want)
	}
}

// Result may be called midway; adding goes on and the final result is
// unchanged.
func TestContiguousResultMidway(t *testing.T) {
	rs := contiguousRows(9)
	want := aggregate(Options{}, rs).Result()
	a := NewWithOptions(Options{Contiguous: true})
	for i, r := range rs {
		a.Add(r)
		if i == len(rs)/2 {
			half := aggregate(Options{}, rs[:i+1]).Result()
			if got := a.Result(); !reflect.DeepEqual(got, half) {
				t.Errorf("midway: %+v, want %+v", got, half)
			}
		}
	}
	if got := a.Result(); !reflect.DeepEqual(got, want) {
		t.Errorf("final: %+v, want %+v", got, want)
	}
}

// A task whose rows come back after another task's is reported, never
// counted twice.
func TestContiguousBroken(t *testing.T) {
	tests := []struct {
		name string
		rows []*pipeline.Rollout
		ok   bool
	}{
		{"same task, two attempts in a row", []*pipeline.Rollout{
			row(0, 0, pipeline.StatusOK, 1, nil), row(0, 1, pipeline.StatusOK, 0, nil), row(1, 0, pipeline.StatusOK, 0, nil)}, true},
		{"same index, other run", []*pipeline.Rollout{
			row(0, 0, pipeline.StatusOK, 1, nil), func() *pipeline.Rollout { r := row(0, 0, pipeline.StatusOK, 0, nil); r.RunID = "x"; return r }()}, true},
		{"attempt of a finished task", []*pipeline.Rollout{
			row(0, 0, pipeline.StatusOK, 1, nil), row(1, 0, pipeline.StatusOK, 0, nil), row(0, 1, pipeline.StatusOK, 0, nil)}, false},
		{"row of a finished group", []*pipeline.Rollout{
			row(5, 0, pipeline.StatusOK, 1, nil), row(6, 0, pipeline.StatusOK, 0, nil), row(7, 0, pipeline.StatusOK, 0, nil), row(5, 0, pipeline.StatusOK, 0, nil)}, false},
	}
	for _, tt := range tests {
		a := aggregate(Options{Contiguous: true}, tt.rows)
		err := a.Err()
		if tt.ok {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			} else if got, want := a.Result(), aggregate(Options{}, tt.rows).Result(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %+v, want %+v", tt.name, got, want)
			}
			continue
		}
		if !errors.Is(err, ErrNotContiguous) {
			t.Errorf("%s: Err() = %v, want ErrNotContiguous", tt.name, err)
		}
	}
	// The default mode takes any order.
	if err := aggregate(Options{}, tests[2].rows).Err(); err != nil {
		t.Errorf("default mode: %v", err)
	}
}

func TestTaskSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s taskSet
	ref := map[taskKey]bool{}
	check := func(k taskKey) {
		t.Helper()
		if got := s.add(k); got != !ref[k] {
			t.Fatalf("add(%#x) = %v, want %v", uint64(k), got, !ref[k])
		}
		ref[k] = true
	}
	// A dense chunk that turns into a bitmap, a sparse one, other runs and
	// far keys.
	for range 20000 {
		check(newTaskKey(0, int64(rng.IntN(10000))))
		check(newTaskKey(int32(rng.IntN(3)), int64(rng.IntN(1<<40))))
		check(newTaskKey(1, 1<<20+int64(rng.IntN(300))))
	}
	if s.n != int64(len(ref)) {
		t.Errorf("n = %d, want %d", s.n, len(ref))
	}
	for k := range ref {
		if !s.has(k) {
			t.Fatalf("has(%#x) = false", uint64(k))
		}
	}
	for range 1000 {
		k := newTaskKey(int32(rng.IntN(4)), int64(rng.IntN(1<<30)))
		if s.has(k) != ref[k] {
			t.Fatalf("has(%#x) = %v, want %v", uint64(k), s.has(k), ref[k])
		}
	}
	if c := s.chunks[uint64(newTaskKey(0, 0))>>16]; c == nil || c.bits == nil {
		t.Error("the dense chunk is not a bitmap")
	}
}
