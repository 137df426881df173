package groups

import (
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// ClassTooLarge is the error class of the rollouts of a group whose rows
// hold more text than one record batch can (collate.MaxRecordBytes): the
// group is not written as it is; its rows go to errors/ with their text
// cut.
const ClassTooLarge = "too_large"

// KeepOfTooLarge is how much of each text a too-large group's rows keep.
const KeepOfTooLarge = 1 << 10

// TooLarge follows the text of each group being collected (Size of its
// members in so far, before any cut). A group is known to be too large as
// soon as it passes Max: from then on its texts are cut as its members
// arrive, so a group never holds more than Max plus one member's text,
// however many long answers it waits for.
type TooLarge struct {
	Size  func(r *pipeline.Rollout) int64
	Max   int64
	texts map[pipeline.GroupKey]int64
}

// Add counts ro, whose group's members in so far are held, and cuts the
// texts of both once the group is over the limit.
func (t *TooLarge) Add(ro *pipeline.Rollout, held []*pipeline.Rollout) {
	if t.texts == nil {
		t.texts = map[pipeline.GroupKey]int64{}
	}
	k := ro.GroupKey()
	before := t.texts[k]
	t.texts[k] = before + t.Size(ro)
	if t.texts[k] <= t.Max {
		return
	}
	if before <= t.Max {
		for _, h := range held {
			if h != nil {
				CutTexts(h)
			}
		}
	}
	CutTexts(ro)
}

// Done returns the text of k's group as it arrived and forgets the group.
func (t *TooLarge) Done(k pipeline.GroupKey) int64 {
	n := t.texts[k]
	delete(t.texts, k)
	return n
}

// Fail fails every rollout of gr when its rows held more text (n, counted
// as they arrived) than a record batch can, counting them (obs.Refail)
// and recording each (failed); their texts are cut already (Add), so
// that the error rows can be written.
func (t *TooLarge) Fail(gr *pipeline.Group, n int64, obs Observer, failed func(*pipeline.Rollout) error) error {
	if n <= t.Max {
		return nil
	}
	msg := fmt.Sprintf("the group's rows hold %d bytes of text, more than one record batch can (%d): its texts are cut to %d bytes", n, t.Max, KeepOfTooLarge)
	for _, ro := range gr.Rollouts {
		if ro.Status != pipeline.StatusOK && ro.Status != pipeline.StatusError {
			continue
		}
		obs.Refail(ro, ClassTooLarge, msg)
		ro.Status, ro.ErrorClass, ro.Error = pipeline.StatusError, ClassTooLarge, msg
		if err := failed(ro); err != nil {
			return err
		}
	}
	return nil
}

// CutTexts cuts ro's message texts to KeepOfTooLarge bytes each; a cut
// text is a copy, so the long one can be freed.
func CutTexts(ro *pipeline.Rollout) {
	cut := func(s string) string {
		if len(s) <= KeepOfTooLarge {
			return s
		}
		return strings.Clone(s[:KeepOfTooLarge])
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
