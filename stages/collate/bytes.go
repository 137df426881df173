package collate

import (
	"math"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
)

// MaxRecordBytes bounds the text of one record batch: an Arrow string
// column holds at most 2 GiB of data (its offsets are 32-bit), and a
// record's column never holds more text than the whole record. A group
// whose rows alone hold more cannot be written (see GroupBytes).
const MaxRecordBytes int64 = math.MaxInt32

// DefaultBatchBytes is the text size at which a Collator hands out a
// record, whatever its rows: a few long completions make a batch as well
// as many short ones.
const DefaultBatchBytes int64 = 256 << 20

// rowOverhead counts a row's short string columns (status, env, model,
// error class): each far shorter.
const rowOverhead = 256

// textBytes is the bytes s takes in a column: its length, or three times
// it when invalid UTF-8 is replaced (U+FFFD is three bytes).
func textBytes(s string) int64 {
	if utf8.ValidString(s) {
		return int64(len(s))
	}
	return 3 * int64(len(s))
}

// RowBytes bounds the text bytes r's row adds to any string column of a
// record (an over-estimate: the sum over all its strings).
func RowBytes(r *pipeline.Rollout) int64 {
	n := int64(rowOverhead) + textBytes(r.Error) + textBytes(r.FinishReason) + textBytes(r.FilterReason) +
		textBytes(r.RunID) + textBytes(r.GroupID) + textBytes(r.TrajID) + textBytes(r.Env)
	if r.Task != nil {
		if utf8.Valid(r.Task.Raw) {
			n += int64(len(r.Task.Raw))
		} else {
			n += 3 * int64(len(r.Task.Raw))
		}
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		n += textBytes(m.Role) + textBytes(m.Content) + textBytes(m.ToolCallID) + textBytes(m.Name)
		for _, p := range m.Parts {
			n += textBytes(p.Type) + textBytes(p.Text) + textBytes(p.ImageURL)
		}
		for _, c := range m.ToolCalls {
			n += textBytes(c.ID) + textBytes(c.Type) + textBytes(c.Name) + textBytes(c.Arguments)
		}
	}
	for k := range r.Metrics {
		n += textBytes(k)
	}
	return n
}

// GroupBytes is RowBytes summed over g's rollouts.
func GroupBytes(g *pipeline.Group) int64 {
	var n int64
	for _, r := range g.Rollouts {
		if r != nil {
			n += RowBytes(r)
		}
	}
	return n
}

// SetBytes sets the text size at which Add hands out a record (batch;
// DefaultBatchBytes when <= 0) and the most a record may hold (max;
// MaxRecordBytes when <= 0, never above it).
func (c *Collator) SetBytes(batch, max int64) {
	if batch <= 0 {
		batch = DefaultBatchBytes
	}
	if max <= 0 || max > MaxRecordBytes {
		max = MaxRecordBytes
	}
	c.batchBytes, c.maxBytes = min(batch, max), max
}

// Bytes is the text the buffered rows hold (RowBytes summed).
func (c *Collator) Bytes() int64 { return c.bytes }

// MaxBytes is the most text a record may hold (SetBytes).
func (c *Collator) MaxBytes() int64 { return c.maxBytes }

// Fits reports whether g can join the buffered rows in one record; when
// it cannot, Flush them first. A group that does not fit an empty
// Collator (GroupBytes over MaxBytes) cannot be written at all.
func (c *Collator) Fits(g *pipeline.Group) bool {
	return c.bytes+GroupBytes(g) <= c.maxBytes
}
