package runstats

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// WriteAggregate asks each environment (by route) for its run result and
// writes them next to metrics.json in dir. Nothing is written when no environment is a
// Finisher or none has anything to say.
func WriteAggregate(ctx context.Context, dir string, routes map[string]envs.Env) error {
	var entries []any
	for _, name := range slices.Sorted(maps.Keys(routes)) {
		env := routes[name]
		switch t := env.(type) {
		case TimedEnv:
			env = t.Env
		case timedEnder:
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
	if err := metrics.WriteJSON(filepath.Join(dir, schema.ServerAggregateMetricsFile), entries); err != nil {
		return fmt.Errorf("aggregate metrics: %w", err)
	}
	return nil
}
