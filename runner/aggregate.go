package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/envs"
)

// AggregateMetricsFile holds what environments that are envs.Finishers
// (the nemo_gym environment's /aggregate_metrics) said about the run, in
// NeMo Gym's _aggregate_metrics.json layout: one entry per environment,
// {"agent_ref": {"name": ENV}, "agent_metrics": ..., "key_metrics": ...,
// "group_level_metrics": ...}.
const AggregateMetricsFile = "aggregate_metrics.json"

// writeAggregate asks the environment for its run result and writes it
// next to metrics.json. Nothing is written when the environment is no
// Finisher or has nothing to say.
func (r *run) writeAggregate(ctx context.Context) error {
	f, ok := r.env.(envs.Finisher)
	if !ok {
		return nil
	}
	res, err := f.Finish(ctx)
	if err != nil || res == nil {
		if err != nil {
			return fmt.Errorf("env %s: aggregate metrics: %w", r.cfg.Env.Name, err)
		}
		return nil
	}
	var entry map[string]any
	if err := json.Unmarshal(res, &entry); err != nil || entry == nil {
		return fmt.Errorf("env %s: aggregate metrics: not a JSON object: %.200s", r.cfg.Env.Name, res)
	}
	entry["agent_ref"] = map[string]any{"name": r.cfg.Env.Name}
	b, err := json.MarshalIndent([]any{entry}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(r.cfg.Output.Dir, AggregateMetricsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
