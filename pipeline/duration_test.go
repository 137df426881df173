package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trajflow/trajflow/pipeline"
)

func TestDurationRange(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"30s", 30 * time.Second, ""},
		{"1.5", 1500 * time.Millisecond, ""},
		{"1e9", 1e9 * time.Second, ""},
		{"NaN", 0, "must be finite"},
		{".nan", 0, "not a duration"},
		{"1e300", 0, "must be finite and at most 1e+09"},
		{"-1e300", 0, "must be finite"},
		{"1e400", 0, "must be finite"},
		{"+Inf", 0, "must be finite"},
		{"5 minutes", 0, "not a duration"},
	} {
		var v struct {
			D pipeline.Duration `yaml:"d"`
		}
		err := yaml.Unmarshal([]byte("d: "+tt.in), &v)
		if tt.err == "" {
			if err != nil || v.D.D() != tt.want {
				t.Errorf("%s: %v %v", tt.in, v.D.D(), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: err %v, want %q", tt.in, err, tt.err)
		}
	}
}
