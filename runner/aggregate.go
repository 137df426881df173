package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/schema"
)

// ServerAggregateMetricsFile holds what environments that are
// envs.Finishers (the nemo_gym environment's resources server, through
// /aggregate_metrics) said about the run, in NeMo Gym's
// _aggregate_metrics.json layout: one entry per environment (route),
// {"agent_ref": {"name": ENV}, "agent_metrics": ..., "key_metrics": ...,
// "group_level_metrics": ...}. trajflow's own figures in that layout are
// in AggregateMetricsFile.
const ServerAggregateMetricsFile = schema.ServerAggregateMetricsFile

// writeAggregate asks each environment for its run result and writes them
// next to metrics.json. Nothing is written when no environment is a
// Finisher or none has anything to say.
func (r *run) writeAggregate(ctx context.Context) error {
	names := make([]string, 0, len(r.envs))
	for name := range r.envs {
		names = append(names, name)
	}
	sort.Strings(names)
	var entries []any
	for _, name := range names {
		env := r.envs[name]
		if t, ok := env.(timedEnv); ok {
			env = t.Env
		}
		f, ok := env.(envs.Finisher)
		if !ok {
			continue
		}
		res, err := f.Finish(ctx)
		if err != nil {
			return fmt.Errorf("env %s: aggregate metrics: %w", name, err)
		}
		if res == nil {
			continue
		}
		var entry map[string]any
		if err := json.Unmarshal(res, &entry); err != nil || entry == nil {
			return fmt.Errorf("env %s: aggregate metrics: not a JSON object: %.200s", name, res)
		}
		entry["agent_ref"] = map[string]any{"name": name}
		entries = append(entries, entry)
	}
	if len(entries) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(r.cfg.Output.Dir, ServerAggregateMetricsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
