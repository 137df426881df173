package envstep

import (
	"fmt"
	"math"
	"sort"

	"github.com/trajflow/trajflow/envs"
)

// MaxAbsReward bounds the reward (and every metric) an environment may
// return for a step: far above any real reward, and far enough below the
// float64 range that a group's mean, standard deviation and advantages
// stay finite. A step outside it fails the rollout (class env).
const MaxAbsReward = 1e12

// checkStep refuses a step whose reward or metrics are not finite or are
// out of range; the error names the field.
func checkStep(st *envs.Step) error {
	if err := checkNumber("reward", st.Reward); err != nil {
		return err
	}
	keys := make([]string, 0, len(st.Metrics))
	for k := range st.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkNumber(fmt.Sprintf("metrics[%q]", k), st.Metrics[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkNumber(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s: %v is not a finite number", field, v)
	case math.Abs(v) > MaxAbsReward:
		return fmt.Errorf("%s: %g is out of range (at most %g in magnitude)", field, v, MaxAbsReward)
	}
	return nil
}
