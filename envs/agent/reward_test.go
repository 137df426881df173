package agent_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs/agent"
)

func TestParseRewardLine(t *testing.T) {
	for _, tc := range []struct {
		line        string
		reward      float64
		metrics     map[string]float64
		wantErrPart string
	}{
		{line: `{"reward": 1}`, reward: 1},
		{line: `  {"reward": -0.5, "metrics": {"acc": 0, "len": 12.5}}  `, reward: -0.5, metrics: map[string]float64{"acc": 0, "len": 12.5}},
		{line: `{"reward": 1e3, "metrics": null, "answer": "x"}`, reward: 1000},
		{line: ``, wantErrPart: "not a JSON object"},
		{line: `1`, wantErrPart: "not a JSON object"},
		{line: `[{"reward": 1}]`, wantErrPart: "not a JSON object"},
		{line: `{"reward": 1`, wantErrPart: "not a JSON object: unexpected end of JSON input"},
		{line: `{"reward": 1} trailing`, wantErrPart: "not a JSON object: invalid character 't' after top-level value"},
		{line: `{}`, wantErrPart: `no "reward" key`},
		{line: `{"reward": null}`, wantErrPart: `"reward" is null, want a number`},
		{line: `{"reward": "0.5"}`, wantErrPart: `"reward" is a string, want a number`},
		{line: `{"reward": true}`, wantErrPart: `"reward" is a boolean, want a number`},
		{line: `{"reward": 1e999}`, wantErrPart: `"reward" is a number out of range, want a number`},
		{line: `{"reward": 1, "metrics": [1]}`, wantErrPart: `"metrics" is an array, want an object of numbers`},
		{line: `{"reward": 1, "metrics": {"acc": "yes"}}`, wantErrPart: `"metrics" key "acc" is a string, want a number`},
	} {
		reward, metrics, err := agent.ParseRewardLine([]byte(tc.line))
		if tc.wantErrPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrPart) {
				t.Errorf("%q: err = %v, want %q", tc.line, err, tc.wantErrPart)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if reward != tc.reward || len(metrics) != len(tc.metrics) {
			t.Errorf("%q: got %v %v, want %v %v", tc.line, reward, metrics, tc.reward, tc.metrics)
		}
		for k, v := range tc.metrics {
			if metrics[k] != v {
				t.Errorf("%q: metrics[%s] = %v, want %v", tc.line, k, metrics[k], v)
			}
		}
	}
}

func FuzzParseRewardLine(f *testing.F) {
	for _, s := range []string{
		`{"reward": 1}`, `{"reward": -0.5, "metrics": {"acc": 0}}`, `{"reward": null}`, `{"metrics": {}}`,
		`{"reward": 1e400}`, `not json`, ``, `{"reward": 1, "metrics": {"a": [1]}}`, "{\"reward\":\u00a01}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		reward, metrics, err := agent.ParseRewardLine(line)
		if err != nil {
			if reward != 0 || metrics != nil {
				t.Fatalf("error %v with a result %v %v", err, reward, metrics)
			}
			return
		}
		if math.IsNaN(reward) || math.IsInf(reward, 0) {
			t.Fatalf("reward %v", reward)
		}
		for k, v := range metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("metric %s = %v", k, v)
			}
		}
		// What was read reads back the same.
		b, err := json.Marshal(map[string]any{"reward": reward, "metrics": metrics})
		if err != nil {
			t.Fatal(err)
		}
		r2, m2, err := agent.ParseRewardLine(b)
		if err != nil || r2 != reward || len(m2) != len(metrics) {
			t.Fatalf("%s: read back %v %v %v", b, r2, m2, err)
		}
		for k, v := range metrics {
			if m2[k] != v {
				t.Fatalf("%s: metric %s read back %v, want %v", b, k, m2[k], v)
			}
		}
	})
}
