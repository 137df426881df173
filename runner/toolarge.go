package runner

import (
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/stages/collate"
)

// ClassTooLarge is the error class of the rollouts of a group whose rows
// hold more text than one record batch can (collate.MaxRecordBytes): the
// group is not written as it is; its rows go to errors/ with their text
// cut.
const ClassTooLarge = "too_large"

// maxRecordBytes is the most text a record batch holds; tests lower it.
var maxRecordBytes = collate.MaxRecordBytes

// keepOfTooLarge is how much of each text a too-large group's rows keep.
const keepOfTooLarge = 1 << 10

// groupText is the text of each group being collected (collate.RowBytes
// of its members in so far, before any cut). A group is known to be too
// large as soon as it passes the record limit: from then on its texts are
// cut as its members arrive, so a group never holds more than the limit
// plus one member's text, however many long answers it waits for.
type groupText map[pipeline.GroupKey]int64

// add counts ro, whose group's members in so far are held, and cuts the
// texts of both once the group is over the limit.
func (t groupText) add(ro *pipeline.Rollout, held []*pipeline.Rollout) {
	k := ro.GroupKey()
	before := t[k]
	t[k] = before + collate.RowBytes(ro)
	if t[k] <= maxRecordBytes {
		return
	}
	if before <= maxRecordBytes {
		for _, h := range held {
			if h != nil {
				cutTexts(h)
			}
		}
	}
	cutTexts(ro)
}

// done returns the text of k's group as it arrived and forgets the group.
func (t groupText) done(k pipeline.GroupKey) int64 {
	n := t[k]
	delete(t, k)
	return n
}

// failTooLarge fails every rollout of gr when its rows held more text (n,
// counted as they arrived) than a record batch can, counting them as
// errors; their texts are cut already (groupText), so that the error rows
// can be written.
func (r *run) failTooLarge(gr *pipeline.Group, n int64) error {
	if n <= maxRecordBytes {
		return nil
	}
	msg := fmt.Sprintf("the group's rows hold %d bytes of text, more than one record batch can (%d): its texts are cut to %d bytes", n, maxRecordBytes, keepOfTooLarge)
	for _, ro := range gr.Rollouts {
		if ro.Status != pipeline.StatusOK && ro.Status != pipeline.StatusError {
			continue
		}
		r.stats.Refail(ro, ClassTooLarge, msg)
		ro.Status, ro.ErrorClass, ro.Error = pipeline.StatusError, ClassTooLarge, msg
		if err := r.side.failures.Write(lines.FailureOf(ro)); err != nil {
			return err
		}
	}
	return nil
}

// cutTexts cuts ro's message texts to keepOfTooLarge bytes each; a cut
// text is a copy, so the long one can be freed.
func cutTexts(ro *pipeline.Rollout) {
	cut := func(s string) string {
		if len(s) <= keepOfTooLarge {
			return s
		}
		return strings.Clone(s[:keepOfTooLarge])
	}
	msgs := make([]pipeline.Message, len(ro.Messages))
	for i, m := range ro.Messages {
		m.Content = cut(m.Content)
		if m.Parts != nil {
			parts := make([]pipeline.ContentPart, len(m.Parts))
			for j, p := range m.Parts {
				p.Text, p.ImageURL = cut(p.Text), cut(p.ImageURL)
				parts[j] = p
			}
			m.Parts = parts
		}
		if m.ToolCalls != nil {
			calls := make([]pipeline.ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				c.Arguments = cut(c.Arguments)
				calls[j] = c
			}
			m.ToolCalls = calls
		}
		msgs[i] = m
	}
	ro.Messages = msgs
}
