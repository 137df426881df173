package openai

import (
	"encoding/json"
	"testing"
)

func TestShowContext(t *testing.T) {
	info := map[string]any{"general.architecture": "llama", "llama.context_length": 8192.0}
	for _, tt := range []struct {
		params string
		info   map[string]any
		want   int64
	}{
		{"num_ctx 2048", info, 2048},
		{"stop \"</s>\"\nnum_ctx     4096\ntemperature 0.7", info, 4096},
		{"num_ctx 16384", info, 8192},
		{"num_ctx 16384", nil, 16384},
		{"num_ctx x", info, 0},
		{"num_ctx -5", info, 0},
		{"", info, 0},
		{"temperature 0.7", info, 0},
	} {
		if got := showContext(tt.info, tt.params); got != tt.want {
			t.Errorf("showContext(%v, %q) = %d, want %d", tt.info, tt.params, got, tt.want)
		}
	}
}

func FuzzShowContext(f *testing.F) {
	f.Add(`{"general.architecture": "qwen3", "qwen3.context_length": 40960}`, "num_ctx 512")
	f.Add(`{}`, "stop \"x\"\nnum_ctx 99999999999999999999")
	f.Add(`{"general.architecture": 3}`, "num_ctx\t7")
	f.Fuzz(func(t *testing.T, info, params string) {
		var m map[string]any
		_ = json.Unmarshal([]byte(info), &m)
		if n := showContext(m, params); n < 0 {
			t.Fatalf("showContext = %d", n)
		}
	})
}
