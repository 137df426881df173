package runstats

import (
	"fmt"
	"maps"
	"slices"

	"github.com/trajflow/trajflow/runner/metrics"
)

// gymAgentMetrics is one entry of AggregateMetricsFile.
type gymAgentMetrics struct {
	AgentRef struct {
		Name string `json:"name"`
	} `json:"agent_ref"`
	// AgentMetrics are trajflow's metrics of the environment's rows (the
	// same object as metrics.json's envs.NAME).
	AgentMetrics *metrics.Metrics `json:"agent_metrics"`
	// KeyMetrics are the headline numbers.
	KeyMetrics map[string]float64 `json:"key_metrics"`
	// GroupLevelMetrics are the at-k metrics (per group of a task's samples).
	GroupLevelMetrics []metrics.AtK `json:"group_level_metrics"`
}

// writeAggregateMetrics writes m's per-environment metrics in NeMo Gym's
// layout, atomically.
func writeAggregateMetrics(path string, m *metrics.Metrics) error {
	out := make([]gymAgentMetrics, 0, len(m.Envs))
	for _, n := range slices.Sorted(maps.Keys(m.Envs)) {
		e := m.Envs[n]
		var a gymAgentMetrics
		a.AgentRef.Name = n
		a.AgentMetrics = e
		a.KeyMetrics = map[string]float64{
			"mean/reward": e.Reward.Mean, "accuracy": e.Correctness.Accuracy,
			"natural_termination_rate": e.NaturalTerminationRate, "avg_turns_per_sample": e.AvgTurnsPerSample,
		}
		if v := e.MeanGenTokensPerSample; v != nil {
			// Absent where no row's training-view counts are known (no
			// token ids): never a 0 that looks like a count.
			a.KeyMetrics["mean_gen_tokens_per_sample"] = *v
		}
		for _, k := range e.AtK {
			a.KeyMetrics[fmt.Sprintf("pass@%d", k.K)] = k.PassAtK
			a.KeyMetrics[fmt.Sprintf("mean@%d", k.K)] = k.MeanAtK
		}
		a.GroupLevelMetrics = e.AtK
		out = append(out, a)
	}
	if err := metrics.WriteJSON(path, out); err != nil {
		return fmt.Errorf("metrics: %s: %w", path, err)
	}
	return nil
}
