package repeat

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// gymRepeat is NeMo Gym's _preprocess_rows_from_config loop (rollout
// collection), written out again: each input row repeated num_repeats
// times in place (abc becomes aabbcc), the rollout index counted per task
// index, and with num_repeats_add_seed the seed set to the rollout index.
// It returns "task/rollout/seed" per materialised row, seed "-" when none
// is added.
func gymRepeat(tasks []int, numRepeats int, addSeed bool) []string {
	if numRepeats == 0 {
		numRepeats = 1 // num_repeats or 1
	}
	next := map[int]int{} // task_idx_to_rollout_idx
	var out []string
	for _, task := range tasks {
		for range numRepeats {
			r := next[task]
			next[task]++
			seed := "-"
			if addSeed {
				seed = fmt.Sprint(r)
			}
			out = append(out, fmt.Sprintf("%d/%d/%s", task, r, seed))
		}
	}
	return out
}

// TestGymRepeatOrder: repeat.n expands tasks in NeMo Gym's aabbcc order
// with the same (task, rollout) indices; repeat.seed: 0 with
// override_row_seed gives rollout r of attempt 0 the seed r, as
// num_repeats_add_seed does (over a row's own seed too); no repeat.seed
// sends none, as Gym without num_repeats_add_seed.
func TestGymRepeatOrder(t *testing.T) {
	tasks := []int{0, 1, 2}
	for _, n := range []int{1, 3} {
		for _, addSeed := range []bool{false, true} {
			cfg := Config{N: n, SeedMode: SeedOffset}
			if addSeed {
				cfg.SetSeed(0)
				cfg.OverrideRowSeed = true
			}
			e := New(cfg, "run", "math", "m")
			var got []string
			for _, ti := range tasks {
				// The row's own seed is replaced under num_repeats_add_seed
				// (and kept otherwise: TestRowSeed).
				task := &pipeline.Task{Index: int64(ti), Params: map[string]any{"seed": 42}}
				if !addSeed {
					task.Params = nil
				}
				for _, r := range e.Expand(task, 0) {
					seed := "-"
					if !r.NoSeed {
						seed = fmt.Sprint(r.Seed)
					}
					got = append(got, fmt.Sprintf("%d/%d/%s", r.Key().TaskIndex, r.RolloutIndex, seed))
				}
			}
			if want := gymRepeat(tasks, n, addSeed); !reflect.DeepEqual(got, want) {
				t.Errorf("n=%d add_seed=%v:\n got  %v\n gym  %v", n, addSeed, got, want)
			}
		}
	}
}
