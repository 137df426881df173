package config_test

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
)

// TestStepKeys: the step-wise, step-row and action-validity keys are
// checked with their config keys named, and are part of the fingerprint
// (history_length 0 differs from none).
func TestStepKeys(t *testing.T) {
	load := func(sets ...string) (*config.Config, error) {
		return config.Parse([]byte("source: {path: t.jsonl}\noutput: {dir: out}\n"), "cfg.yaml", sets)
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"env.history_length=-1"}, "env.history_length: must be >= 0"},
		{[]string{"env.step_template=x"}, "env.step_template: needs history_length"},
		{[]string{"env.history_length=1", `env.step_template="{question}"`}, "env.step_template: unknown placeholder {question}"},
		{[]string{"env.invalid_action_penalty=-1"}, "env.invalid_action_penalty: must be a finite number >= 0"},
		{[]string{"groups.gamma=1.5"}, "groups.gamma: must be in [0, 1]"},
		{[]string{"groups.step_advantage=zscore"}, "groups.step_advantage"},
		{[]string{"groups.step_advantage_w=.nan"}, "groups.step_advantage_w: must be a finite number"},
		{[]string{"groups.max_rollouts=-1"}, "groups.max_rollouts: must be >= 0"},
		{[]string{"groups.resample=batch"}, "groups.resample: batch samples the input again until groups.target"},
		{[]string{"env.invalid_action_penalty=0.1"}, "env.invalid_action_penalty: is charged in the step rows"},
	} {
		_, err := load(c.sets...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.sets, err, c.want)
		}
	}
	fp := func(sets ...string) string {
		cfg, err := load(sets...)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := cfg.Fingerprint()
		return h
	}
	base := fp()
	seen := map[string]string{"": base}
	for _, set := range []string{"env.history_length=0", "env.history_length=2", "output.steps=true", "groups.gamma=0.9", "groups.step_advantage=mean_std_norm", "groups.step_advantage_w=0.5"} {
		h := fp(set)
		for k, v := range seen {
			if v == h {
				t.Errorf("%s has the fingerprint of %q", set, k)
			}
		}
		seen[set] = h
	}
	if fp("output.steps=true", "env.invalid_action_penalty=0.1") == fp("output.steps=true") {
		t.Error("invalid_action_penalty left the fingerprint as it was")
	}
	if fp("groups.gamma=1") != base {
		t.Error("the default gamma changed the fingerprint")
	}
}
