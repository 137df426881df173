package agent

import (
	"bytes"
)

// tail keeps the last max bytes written to it.
type tail struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tail) Write(b []byte) (int, error) {
	n := len(b)
	if len(b) >= t.max {
		t.truncated = t.truncated || len(t.buf) > 0 || len(b) > t.max
		t.buf = append(t.buf[:0], b[len(b)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(b) - t.max; over > 0 {
		t.truncated = true
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, b...)
	return n, nil
}

// text is the kept bytes, whitespace trimmed, "..." in front when earlier
// ones were dropped.
func (t *tail) text() string {
	s := string(bytes.TrimSpace(t.buf))
	if t.truncated && s != "" {
		s = "..." + s
	}
	return s
}
