package build

import (
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// A token-id prompt is keyed by where it goes: /v1/completions under
// generate.api: tokens, SGLang's /generate under sglang; the same request
// twice is one key.
func TestCacheKeyTokenPrompts(t *testing.T) {
	req := &inference.Request{PromptTokenIDs: []int32{1, 2, 3}, Params: map[string]any{"max_tokens": 8, "seed": 1}, Sample: "s"}
	key := func(api inference.API) string {
		k, err := cacheKey("m", api)(req)
		if err != nil {
			t.Fatal(err)
		}
		return string(k[:])
	}
	tests := []struct {
		a, b inference.API
		same bool
	}{
		{inference.APISGLang, inference.APISGLang, true},
		{inference.APITokens, inference.APITokens, true},
		{inference.APITokens, inference.APISGLang, false},
	}
	for _, tt := range tests {
		if got := key(tt.a) == key(tt.b); got != tt.same {
			t.Errorf("%s and %s: same key %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}

// A request that asks for routed experts is keyed apart from the same
// request without the ask (vLLM's body does not carry it), and by the
// layer count it reads SGLang's routes with.
func TestCacheKeyRoutedExperts(t *testing.T) {
	key := func(api inference.API, routed bool, layers int) string {
		req := &inference.Request{PromptTokenIDs: []int32{1, 2, 3}, Params: map[string]any{"max_tokens": 8}, Sample: "s",
			RoutedExperts: routed, RoutedExpertsLayers: layers}
		k, err := cacheKey("m", api)(req)
		if err != nil {
			t.Fatal(err)
		}
		return string(k[:])
	}
	for _, api := range []inference.API{inference.APITokens, inference.APISGLang} {
		once, again := key(api, true, 2), key(api, true, 2) // the key is a function of the request
		if key(api, true, 0) == key(api, false, 0) || once == key(api, true, 0) || once != again {
			t.Errorf("%s: routed experts not in the key", api)
		}
	}
}
