// Package stderrlines copies the stderr of processes an environment runs
// (subprocess workers, agents) to trajflow's own, each line whole and
// prefixed with its process's name, so that the lines of processes
// running at once never interleave.
package stderrlines

import (
	"bytes"
	"io"
	"sync"
)

// MaxLine bounds a line held back for its end: a longer one is written in
// pieces.
const MaxLine = 64 << 10

// Sink serializes whole lines from several processes onto one writer.
type Sink struct {
	mu sync.Mutex
	w  io.Writer
}

// NewSink returns a Sink writing to w.
func NewSink(w io.Writer) *Sink { return &Sink{w: w} }

// line writes prefix, line and a newline in one write. A failing writer is
// ignored: trajflow's stderr failing must not fail an environment.
func (s *Sink) line(prefix string, line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := make([]byte, 0, len(prefix)+len(line)+1)
	buf = append(buf, prefix...)
	buf = append(buf, line...)
	buf = append(buf, '\n')
	_, _ = s.w.Write(buf) // best effort: see above
}

// Prefixed splits one process's stderr into lines and writes each whole
// to a Sink, with the process's prefix. It is safe for concurrent use.
type Prefixed struct {
	prefix string
	sink   *Sink

	mu  sync.Mutex
	buf []byte
}

// Prefixed returns the writer of one process's stderr.
func (s *Sink) Prefixed(prefix string) *Prefixed { return &Prefixed{prefix: prefix, sink: s} }

// Write writes the whole lines of b (and what came before them), keeping
// an unterminated end for the next write; it never fails.
func (p *Prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.sink.line(p.prefix, bytes.TrimRight(p.buf[:i], "\r"))
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > MaxLine {
		p.sink.line(p.prefix, p.buf)
		p.buf = nil
	}
	if len(p.buf) == 0 {
		p.buf = nil
	}
	return len(b), nil
}

// Flush writes a last unterminated line.
func (p *Prefixed) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.sink.line(p.prefix, p.buf)
		p.buf = nil
	}
}
