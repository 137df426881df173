package schema

import "testing"

func TestValidUTF8(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"héllo ✓", "héllo ✓"},
		{"a\xffb", "a\uFFFDb"},
		{"a\xff\xfe\xc0b", "a\uFFFDb"}, // one run, one replacement
		{"\xffa\xfe", "\uFFFDa\uFFFD"},
	} {
		if got := ValidUTF8(tt.in); got != tt.want {
			t.Errorf("ValidUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := string(ValidUTF8Bytes([]byte(tt.in))); got != tt.want {
			t.Errorf("ValidUTF8Bytes(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
