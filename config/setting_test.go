package config_test

import (
	"reflect"
	"testing"

	"github.com/trajflow/trajflow/config"
)

// Setting reads a key as a config file spells it, through inline
// sections, with secrets redacted; an unknown key is not ok.
func TestSetting(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {path: tasks.jsonl}
generate: {endpoints: ["sim://"], model: m, params: {temperature: 0.5, api_key: sk-123}}
output: {dir: out, jsonl: true, jsonl_rows: all, compression: snappy}
`), "c.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key  string
		want any
		ok   bool
	}{
		{"output.jsonl", true, true},
		{"output.jsonl_rows", "all", true},
		{"output.steps", false, true},
		{"output.compression", "snappy", true}, // inline: output's parquet.Config
		{"generate.model", "m", true},          // inline: generate's inference.Config
		{"generate.params", map[string]any{"temperature": 0.5, "api_key": config.Redacted}, true},
		{"output.nope", nil, false},
		{"output.jsonl.x", nil, false},
		{"", nil, false},
	} {
		got, ok := cfg.Setting(tt.key)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Setting(%q) = %#v, %v; want %#v, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
}
