package pipeline_test

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestPlainTypeError(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"line 3: cannot unmarshal !!str `four` into int", "line 3: want a whole number, got the text `four`"},
		{"cannot unmarshal !!seq into map[string]interface {}", "want a mapping, got a list"},
		{"cannot unmarshal !!map into string", "want a string, got a mapping"},
		{"cannot unmarshal !!str `x` into float64", "want a number, got the text `x`"},
		{"cannot unmarshal !!int `3` into bool", "want true or false, got the number 3"},
		{"cannot unmarshal !!str `a` into []string", "want a list, got the text `a`"},
		{"cannot unmarshal !!seq into config.Generate", "want a mapping, got a list"},
		{"cannot unmarshal !!bool `true` into *uint8", "want a whole number, got true"},
		{"field bogus not found in type config.Config", "field bogus not found in type config.Config"},
	} {
		if got := pipeline.PlainTypeError(tt.in); got != tt.want {
			t.Errorf("PlainTypeError(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzPlainTypeError(f *testing.F) {
	for _, s := range []string{"line 1: cannot unmarshal !!str `a` into int", "cannot unmarshal !!seq into x", "cannot unmarshal !! into", "`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		got := pipeline.PlainTypeError(m)
		// What is not a type error is left as it is; a type error keeps
		// what came before it and loses YAML's words.
		if !strings.Contains(m, "cannot unmarshal !!") && got != m {
			t.Fatalf("PlainTypeError(%q) = %q: changed a message it does not read", m, got)
		}
		if got != m && (!strings.Contains(got, "want ") || !strings.Contains(got, ", got ")) {
			t.Fatalf("PlainTypeError(%q) = %q", m, got)
		}
	})
}
