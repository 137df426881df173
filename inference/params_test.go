package inference

import (
	"reflect"
	"testing"
)

// TestMergeParams checks NeMo Gym's shallow merge (`row | overrides`): the
// config wins key by key at the top level, replacing a nested map whole.
func TestMergeParams(t *testing.T) {
	cases := []struct {
		name     string
		row, cfg map[string]any
		want     map[string]any
	}{
		{"both nil", nil, nil, map[string]any{}},
		{"row only", map[string]any{"temperature": 1.0}, nil, map[string]any{"temperature": 1.0}},
		{"config only", nil, map[string]any{"logprobs": true}, map[string]any{"logprobs": true}},
		{"config wins", map[string]any{"temperature": 1.0, "max_tokens": 512},
			map[string]any{"temperature": 0.6},
			map[string]any{"temperature": 0.6, "max_tokens": 512}},
		{"nested map replaced whole",
			map[string]any{"extra_body": map[string]any{"top_k": 20, "min_p": 0.05}},
			map[string]any{"extra_body": map[string]any{"top_k": 50}},
			map[string]any{"extra_body": map[string]any{"top_k": 50}}},
		{"map replaced by scalar",
			map[string]any{"extra_body": map[string]any{"top_k": 20}},
			map[string]any{"extra_body": nil},
			map[string]any{"extra_body": nil}},
		{"row map kept when config lacks the key",
			map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}},
			map[string]any{"seed": 3},
			map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}, "seed": 3}},
		{"slice replaced", map[string]any{"stop": []any{"a", "b"}}, map[string]any{"stop": []any{"c"}},
			map[string]any{"stop": []any{"c"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := MergeParams(c.row, c.cfg); !reflect.DeepEqual(got, c.want) {
				t.Errorf("MergeParams = %#v, want %#v", got, c.want)
			}
		})
	}
}

// TestMergeParamsCopies checks that the result shares no map with its inputs.
func TestMergeParamsCopies(t *testing.T) {
	rowEB := map[string]any{"top_k": 20}
	cfgEB := map[string]any{"min_p": 0.1}
	row := map[string]any{"extra_body": rowEB, "chat_template_kwargs": map[string]any{"x": 1}}
	cfg := map[string]any{"extra_body": cfgEB}
	got := MergeParams(row, cfg)
	got["extra_body"].(map[string]any)["min_p"] = 0.9
	got["chat_template_kwargs"].(map[string]any)["x"] = 2
	if cfgEB["min_p"] != 0.1 || row["chat_template_kwargs"].(map[string]any)["x"] != 1 || rowEB["top_k"] != 20 {
		t.Errorf("inputs modified: row %v, cfg %v", row, cfg)
	}
}
