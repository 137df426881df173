package gateway

import (
	"net/http"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
)

type pipelineToolCall = pipeline.ToolCall

// sse writes server-sent events. The answer is whole before its first
// event is written, so flushing each event would delay nothing the agent
// waits for and cost a write to the connection per delta of ~64 bytes
// (measured in bench/gateway: the largest part of a streamed call's
// cost): the events go through the response's buffer, which is flushed
// when it fills and by flush, after the last.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event: an "event:" line when name is set, then the
// data line. Write errors (a client gone) are dropped: the request's end
// is what tells. It does not flush.
func (s *sse) event(name string, data []byte) {
	buf := make([]byte, 0, len(data)+len(name)+16)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	_, _ = s.w.Write(buf)
}

// flush sends what the events wrote so far.
func (s *sse) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// deltaSize is about how many bytes each streamed delta holds.
const deltaSize = 64

// split cuts s into pieces of about deltaSize bytes, never inside a
// UTF-8 sequence. The empty string is no pieces.
func split(s string) []string {
	var out []string
	for len(s) > 0 {
		n := deltaSize
		if n >= len(s) {
			out = append(out, s)
			break
		}
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
