package wire

import (
	"encoding/json"
	"testing"
)

// TestStateKeptLikeNeMoRLMetadata: a step response without state keeps
// the trajectory's state, as NeMo RL's rollout keeps extra_env_info when
// an environment returns None metadata (`if metadata is not None:
// extra_env_info = metadata`, both loops). The NeMo RL side is computed
// here from the same responses, "state" left out standing for None.
func TestStateKeptLikeNeMoRLMetadata(t *testing.T) {
	steps := []string{`{"state": {"n": 1}}`, `{}`, `{"reward": 1}`, `{"state": {"n": 2}}`, `{"observations": [{"content": "x"}]}`, `{"state": "s"}`, `{}`}
	var state any = "reset"
	nemo := "reset" // extra_env_info, as compact JSON
	for i, s := range steps {
		r, err := Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		state = r.Step(state).State

		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &fields); err != nil {
			t.Fatal(err)
		}
		if metadata, ok := fields["state"]; ok { // metadata is not None
			nemo = string(metadata)
		}

		got := "reset"
		if raw, ok := state.(json.RawMessage); ok {
			var v any
			json.Unmarshal(raw, &v)
			b, _ := json.Marshal(v)
			got = string(b)
		}
		var want any = nemo
		if nemo != "reset" {
			var v any
			json.Unmarshal([]byte(nemo), &v)
			b, _ := json.Marshal(v)
			want = string(b)
		}
		if got != want {
			t.Fatalf("step %d (%s): state %s, NeMo RL's extra_env_info %s", i, s, got, want)
		}
	}
}
