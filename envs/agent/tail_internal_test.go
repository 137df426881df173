package agent

import (
	"testing"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		max    int
		want   string
	}{
		{[]string{"abc"}, 10, "abc"},
		{[]string{"abc", "def"}, 4, "...cdef"},
		{[]string{"abcdefgh"}, 4, "...efgh"},
		{[]string{"abcd"}, 4, "abcd"},
		{[]string{"ab", "cdef"}, 4, "...cdef"},
		{[]string{"  \n", "x\n"}, 10, "x"},
	} {
		tl := &tail{max: tc.max}
		for _, w := range tc.writes {
			if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if got := tl.text(); got != tc.want {
			t.Errorf("%q max %d: %q, want %q", tc.writes, tc.max, got, tc.want)
		}
		if len(tl.buf) > tc.max {
			t.Errorf("%q: kept %d bytes, max %d", tc.writes, len(tl.buf), tc.max)
		}
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                     "",
		"a\nb\n":               "b",
		"a\r\nb\r\n\r\n  \n":   "b",
		"only":                 "only",
		"x\n  {\"reward\":1} ": `{"reward":1}`,
	} {
		if got := string(lastLine([]byte(in))); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}
