package stderrlines_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/envs/internal/stderrlines"
)

// A line over MaxLine is written in one piece (its first MaxLine-odd
// bytes when they came, the rest at Flush); lines of processes writing at
// once never interleave; \r\n ends a line as \n does.
func TestPrefixed(t *testing.T) {
	var out strings.Builder
	sink := stderrlines.NewSink(&out)
	p := sink.Prefixed("> ")
	long := strings.Repeat("x", stderrlines.MaxLine+10)
	_, _ = p.Write([]byte(long))
	p.Flush()
	if got := strings.Count(out.String(), "> "); got != 1 || len(out.String()) != len(long)+3 {
		t.Errorf("a line over the bound was written in %d pieces, %d bytes", got, len(out.String()))
	}

	out.Reset()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := sink.Prefixed(fmt.Sprintf("[%d] ", w))
			for i := range 50 {
				// A line in two writes.
				_, _ = fmt.Fprintf(q, "line %d of ", i)
				_, _ = fmt.Fprintf(q, "worker %d\r\n", w)
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d lines, want 200", len(lines))
	}
	for _, l := range lines {
		var w, i, w2 int
		if n, err := fmt.Sscanf(l, "[%d] line %d of worker %d", &w, &i, &w2); n != 3 || err != nil || w != w2 || strings.HasSuffix(l, "\r") {
			t.Fatalf("interleaved or torn line %q", l)
		}
	}
}
