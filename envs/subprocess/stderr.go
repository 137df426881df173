package subprocess

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"syscall"
)

// lockedWriter serializes whole lines from several workers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) writeLine(prefix string, line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := make([]byte, 0, len(prefix)+len(line)+1)
	buf = append(buf, prefix...)
	buf = append(buf, line...)
	buf = append(buf, '\n')
	_, _ = l.w.Write(buf) // best effort: a failing stderr must not fail the env
}

// prefixWriter splits a worker's stderr into lines and writes each with the
// worker's prefix.
type prefixWriter struct {
	prefix string
	w      *lockedWriter

	mu  sync.Mutex
	buf []byte
}

const maxStderrLine = 64 << 10

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.w.writeLine(p.prefix, bytes.TrimRight(p.buf[:i], "\r"))
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > maxStderrLine {
		p.w.writeLine(p.prefix, p.buf)
		p.buf = nil
	}
	if len(p.buf) == 0 {
		p.buf = nil
	}
	return len(b), nil
}

// flush writes a last unterminated line.
func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.w.writeLine(p.prefix, p.buf)
		p.buf = nil
	}
}

func isBrokenPipe(err error) bool { return errors.Is(err, syscall.EPIPE) }
