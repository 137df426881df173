package groups

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/collate"
)

// TestGroupTextCutsOnceOverTheLimit: a group's texts are cut as soon as
// its members in so far pass the record limit, the held ones included,
// not when its last member arrives; below the limit nothing is cut; the
// cut text is a copy (the long one can be freed); Fail judges by
// the text as it arrived.
func TestGroupTextCutsOnceOverTheLimit(t *testing.T) {
	task := &pipeline.Task{Index: 7}
	member := func(i int) *pipeline.Rollout {
		return &pipeline.Rollout{Task: task, RolloutIndex: i, GroupSize: 4, Status: pipeline.StatusOK,
			Messages: []pipeline.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: strings.Repeat("x", 1<<20)}}}
	}
	c, texts := NewCollector(), &TooLarge{Size: collate.RowBytes, Max: 3 << 20}
	var in []*pipeline.Rollout
	var gr *pipeline.Group
	for i := range 4 {
		ro := member(i)
		in = append(in, ro)
		texts.Add(ro, c.Held(ro.GroupKey()))
		g, err := c.Add(ro)
		if err != nil {
			t.Fatal(err)
		}
		gr = g
		long := 0
		for _, r := range in {
			if len(r.Messages[1].Content) > KeepOfTooLarge {
				long++
			}
		}
		// 1, 2 and 3 MiB of answers are under 3 MiB plus the row
		// overheads only for the first two.
		want := map[int]int{0: 1, 1: 2, 2: 0, 3: 0}[i]
		if long != want {
			t.Fatalf("after member %d: %d long texts held, want %d", i, long, want)
		}
	}
	if gr == nil {
		t.Fatal("the group did not complete")
	}
	cut := gr.Rollouts[0].Messages[1].Content
	orig := strings.Repeat("x", 1<<20)
	if cut != orig[:KeepOfTooLarge] {
		t.Fatalf("cut text %q…", cut[:16])
	}
	n := texts.Done(gr.Key)
	if n <= 4<<20 {
		t.Fatalf("the group's text as it arrived: %d bytes", n)
	}
	if len(texts.texts) != 0 {
		t.Fatalf("%d groups still counted", len(texts.texts))
	}
	// The cut text does not point into the member's original answer.
	in2 := member(0)
	before := in2.Messages[1].Content
	CutTexts(in2)
	if unsafe.StringData(in2.Messages[1].Content) == unsafe.StringData(before) {
		t.Fatal("the cut text shares the long text's memory")
	}
}
