package groups_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// decided renders decisions as "task/attempt:verdict" in order.
func decided(ds []groups.Decision) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%d/%d:%s", d.Group.Key.TaskIndex, d.Group.Key.Attempt, []string{"keep", "drop", "surplus", "unfiltered"}[d.Verdict]))
	}
	return strings.Join(s, " ")
}

// finished is task i's group of the attempt, kept or dropped by zero_std.
func finished(i int64, attempt int, kept bool) *pipeline.Group {
	g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: i, Attempt: attempt}, Kept: kept}
	if !kept {
		g.FilterReason = groups.ReasonZeroStd
	}
	return g
}

// read hands out and reads n tasks from c.
func read(t *testing.T, c *groups.Controller, n int) []*pipeline.Task {
	t.Helper()
	var ts []*pipeline.Task
	for i := range n {
		act, _, err := c.Next(context.Background())
		if err != nil || act != groups.ActRead {
			t.Fatalf("Next %d: %v %v", i, act, err)
		}
		task := &pipeline.Task{Index: int64(10 + i)}
		c.ReadDone(task)
		ts = append(ts, task)
	}
	return ts
}

// TestTaskOrderReleasesInReadOrder: under groups.order: task a finished
// group waits for every earlier task; a dropped attempt with another to
// come goes at once; an abandoned task releases what waits behind it; the
// target counts released groups only, and what waits when it is reached
// is surplus.
func TestTaskOrderReleasesInReadOrder(t *testing.T) {
	reached := 0
	c := groups.NewController(groups.Config{Keep: "nonzero_std", MaxAttempts: 2, Resample: "same_task", Target: 3, Order: "task"}, 8, 0, func() { reached++ })
	ts := read(t, c, 5) // tasks 10..14
	steps := []struct {
		do   func() []groups.Decision
		want string
	}{
		{func() []groups.Decision { return c.GroupDone(finished(12, 0, true), ts[2]) }, ""},
		{func() []groups.Decision { return c.GroupDone(finished(10, 0, false), ts[0]) }, "10/0:drop"}, // tried again
		{func() []groups.Decision { return c.GroupDone(finished(13, 0, true), ts[3]) }, ""},
		{func() []groups.Decision { c.Abandon(ts[1]); return nil }, ""}, // task 11 rejected; 10 still out
		{func() []groups.Decision { return c.GroupDone(finished(14, 0, true), ts[4]) }, ""},
		{func() []groups.Decision { return c.GroupDone(finished(10, 1, true), ts[0]) }, "10/1:keep 12/0:keep 13/0:keep 14/0:surplus"},
	}
	for i, s := range steps {
		if got := decided(s.do()); got != s.want {
			t.Fatalf("step %d: %q, want %q", i, got, s.want)
		}
	}
	if reached != 1 {
		t.Fatalf("onReached called %d times", reached)
	}
	if kept, short := c.ShortOfTarget(); kept != 3 || short {
		t.Fatalf("kept %d short %v", kept, short)
	}
}

// TestTaskOrderHoldsBehindACutOffTask: a stop cuts task 0 off; the groups
// finished behind it are not released but handed back as held by Flush.
func TestTaskOrderHoldsBehindACutOffTask(t *testing.T) {
	c := groups.NewController(groups.Config{Keep: "all", MaxAttempts: 1, Order: "task"}, 4, 0, nil)
	ts := read(t, c, 3)
	if got := decided(c.GroupDone(finished(11, 0, true), ts[1])); got != "" {
		t.Fatalf("released %q behind an unresolved task", got)
	}
	c.Stop()
	c.CutOff()
	c.GroupDone(finished(12, 0, true), ts[2])
	out, held := c.Flush()
	if len(out) != 0 || len(held) != 2 {
		t.Fatalf("flush: %q and %d held, want nothing released and 2 held", decided(out), len(held))
	}
}

// TestKeepUnfiltered: the last attempts the rule dropped wait as
// candidates, no more than the target still needs; when the input ends
// short they fill it (first first); when the target is reached they are
// dropped.
func TestKeepUnfiltered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order string
		done  []*pipeline.Group
		now   string // decided by the GroupDone calls
		flush string // decided by Flush
		kept  int
	}{
		{"fills the target", "task",
			[]*pipeline.Group{finished(10, 0, false), finished(11, 0, true), finished(12, 0, false), finished(13, 0, false)},
			"11/0:keep 13/0:drop", "10/0:unfiltered 12/0:unfiltered", 3},
		{"target reached: candidates dropped", "completion",
			[]*pipeline.Group{finished(10, 0, false), finished(11, 0, true), finished(12, 0, true), finished(13, 0, true)},
			"11/0:keep 12/0:keep 13/0:keep 10/0:drop", "", 3},
		{"an error is never a candidate", "completion",
			[]*pipeline.Group{{Key: pipeline.GroupKey{TaskIndex: 10}, FilterReason: groups.ReasonError}, finished(11, 0, true)},
			"10/0:drop 11/0:keep", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := groups.NewController(groups.Config{Keep: "nonzero_std", MaxAttempts: 1, Target: 3, Order: tc.order, OnExhausted: "keep_unfiltered"}, 8, 0, nil)
			ts := read(t, c, len(tc.done))
			var now []groups.Decision
			for i, g := range tc.done {
				now = append(now, c.GroupDone(g, ts[i])...)
			}
			if got := decided(now); got != tc.now {
				t.Fatalf("decided %q, want %q", got, tc.now)
			}
			out, _ := c.Flush()
			if got := decided(out); got != tc.flush {
				t.Fatalf("flush decided %q, want %q", got, tc.flush)
			}
			if kept, _ := c.ShortOfTarget(); kept != tc.kept {
				t.Fatalf("kept %d, want %d", kept, tc.kept)
			}
		})
	}
}

// TestMarkUnfiltered: a dropped group kept without the rule is kept, its
// reason prefixed, its filtered members ok again, its failed ones left.
func TestMarkUnfiltered(t *testing.T) {
	g := group(1, 1)
	groups.NewRule(groups.Config{Keep: "nonzero_std"}).Apply(g)
	groups.MarkUnfiltered(g)
	if !g.Kept || g.FilterReason != "unfiltered:zero_std" {
		t.Fatalf("kept %v reason %q", g.Kept, g.FilterReason)
	}
	for _, r := range g.Rollouts {
		if !r.Kept || r.Status != pipeline.StatusOK || r.FilterReason != g.FilterReason {
			t.Fatalf("member %d: kept %v status %s reason %q", r.RolloutIndex, r.Kept, r.Status, r.FilterReason)
		}
	}
}

// TestTargetReachedByEarlierRuns: a controller whose earlier runs' kept
// groups already reach the target hands out nothing and says done at
// once, in either order, without calling onReached and without being short;
// one group short it still reads.
func TestTargetReachedByEarlierRuns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		order    string
		kept     int
		wantRead bool
	}{
		{"completion, reached", "completion", 24, false},
		{"task, reached", "task", 24, false},
		{"task, beyond", "task", 30, false},
		{"completion, one short", "completion", 23, true},
		{"task, one short", "task", 23, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := 0
			c := groups.NewController(groups.Config{Keep: "nonzero_std", MaxAttempts: 2, Target: 24, Order: tc.order}, 8, tc.kept, func() { called++ })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			act, _, err := c.Next(ctx)
			if err != nil {
				t.Fatalf("Next: %v (it waited)", err)
			}
			if got := act == groups.ActRead; got != tc.wantRead {
				t.Fatalf("Next = %v, want a read: %v", act, tc.wantRead)
			}
			if kept, short := c.ShortOfTarget(); kept != tc.kept || short == !tc.wantRead {
				t.Fatalf("ShortOfTarget = %d, %v", kept, short)
			}
			if called != 0 {
				t.Fatalf("onReached called %d times for earlier runs' groups", called)
			}
		})
	}
}
