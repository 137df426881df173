package inference_test

import (
	"errors"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

func TestAPI(t *testing.T) {
	tests := []struct {
		yaml   string
		want   inference.API
		valid  bool
		tokens bool
		batch  bool
		body   inference.API
	}{
		{"chat", inference.APIChat, true, false, false, inference.APIChat},
		{"completions", inference.APICompletions, true, false, false, inference.APICompletions},
		{"tokens", inference.APITokens, true, true, false, inference.APITokens},
		{"batch", inference.APIBatch, true, false, true, inference.APIChat},
		{"sglang", inference.APISGLang, true, true, false, inference.APISGLang},
		{"responses", "responses", false, false, false, "responses"},
		{"Chat", "Chat", false, false, false, "Chat"},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			var c inference.Config
			if err := yaml.Unmarshal([]byte("api: "+tt.yaml+"\n"), &c); err != nil {
				t.Fatalf("decode api: %s: %v", tt.yaml, err)
			}
			if c.API != tt.want {
				t.Fatalf("decoded %q, want %q", c.API, tt.want)
			}
			if got := c.API.Valid(); got != tt.valid {
				t.Errorf("Valid() = %v, want %v", got, tt.valid)
			}
			if got := c.API.Tokens(); got != tt.tokens {
				t.Errorf("Tokens() = %v, want %v", got, tt.tokens)
			}
			if got := c.API.Batch(); got != tt.batch {
				t.Errorf("Batch() = %v, want %v", got, tt.batch)
			}
			if got := c.API.Body(); got != tt.body {
				t.Errorf("Body() = %q, want %q", got, tt.body)
			}
			c.SetDefaults()
			err := c.Validate()
			if apiProblem := hasKey(err, "api"); apiProblem == tt.valid {
				t.Errorf("Validate() = %v: a problem of api is %v, want %v", err, apiProblem, !tt.valid)
			}
		})
	}
}

// hasKey reports whether err holds a *pipeline.KeyError of key.
func hasKey(err error, key string) bool {
	for _, e := range pipeline.Unjoin(err) {
		var ke *pipeline.KeyError
		if errors.As(e, &ke) && ke.Key == key {
			return true
		}
	}
	return false
}

func TestAPIsAreValidAndDefaultFirst(t *testing.T) {
	apis := inference.APIs()
	if len(apis) != 5 {
		t.Fatalf("APIs() = %v, want the 5 values of generate.api", apis)
	}
	for _, a := range apis {
		if !a.Valid() {
			t.Errorf("%q is listed but not Valid", a)
		}
	}
	var c inference.Config
	c.SetDefaults()
	if c.API != apis[0] {
		t.Errorf("default %q, want APIs()[0] = %q", c.API, apis[0])
	}
}
