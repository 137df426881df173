package pipeline_test

import (
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func TestRedactURLs(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://h:8000/v1", "http://h:8000/v1"},
		{"http://TOKEN@h:8000/v1", "http://[REDACTED]@h:8000/v1"},
		{"see https://u:pw@h/v1?key=k#frag now", "see https://[REDACTED]@h/v1?[REDACTED]#frag now"},
		{"a@b c://d@e/f@g", "a@b c://[REDACTED]@e/f@g"},
		{"no url", "no url"},
	} {
		if got := pipeline.RedactURLs(tt.in); got != tt.want {
			t.Errorf("RedactURLs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
