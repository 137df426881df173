package inference_test

import (
	"encoding/json"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// FuzzPythonJSON checks that any valid JSON text re-serialises without
// error into valid JSON (but past the float range, which Python writes as
// Infinity) that is a fixed point, and that invalid text is refused.
func FuzzPythonJSON(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1.50,"x\u0001"],"a":2}`, `"Zürich"`, `1e400`, `-0`, `[]`, `{"x": {}}`, `{`, `1 2`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := inference.PythonJSON([]byte(s))
		if !json.Valid([]byte(s)) {
			if err == nil {
				t.Fatalf("invalid %q gave %q", s, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid %q: %v", s, err)
		}
		if !json.Valid([]byte(out)) {
			return // Infinity
		}
		again, err := inference.PythonJSON([]byte(out))
		if err != nil || again != out {
			t.Fatalf("%q → %q → %q, %v", s, out, again, err)
		}
	})
}
