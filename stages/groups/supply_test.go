package groups

import (
	"context"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// TestSupplyRaisesTheTarget: a controller following a supply admits
// nothing while nothing is asked for, admits on Raise, never reaches a
// target (groups finishing after the demand was met are kept, not
// surplus), and waits for the next Raise rather than ending.
func TestSupplyRaisesTheTarget(t *testing.T) {
	cfg := Config{}
	cfg.SetDefaults()
	reached := false
	c := NewController(cfg, 4, 0, func() { reached = true })
	s := NewSupply(0)
	c.Follow(s)

	next := func(wait time.Duration) (Action, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		act, _, err := c.Next(ctx)
		return act, err == nil
	}
	if _, ok := next(20 * time.Millisecond); ok {
		t.Fatal("Next handed out a group with nothing asked for")
	}
	s.Raise(2)
	s.Raise(1) // lower: ignored
	if s.Target() != 2 {
		t.Fatalf("target %d, want 2", s.Target())
	}
	var handed int
	for {
		act, ok := next(20 * time.Millisecond)
		if !ok {
			break
		}
		if act != ActRead {
			t.Fatalf("action %v, want ActRead", act)
		}
		c.ReadDone(&pipeline.Task{Index: int64(handed)})
		handed++
	}
	if handed < 2 || handed > 4 {
		t.Fatalf("%d groups in flight for a demand of 2 (cap 4)", handed)
	}
	for i := 0; i < handed; i++ {
		g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: int64(i)}, Kept: true}
		for _, d := range c.GroupDone(g, &pipeline.Task{Index: int64(i)}) {
			if d.Verdict != Keep {
				t.Fatalf("group %d: verdict %v, want Keep (nothing is surplus in a continuous run)", i, d.Verdict)
			}
		}
	}
	if reached {
		t.Fatal("a continuous run reached its target")
	}
	if _, short := c.ShortOfTarget(); short {
		t.Fatal("a continuous run reports short of target")
	}
	// The demand is met: Next waits (not ActDone) until the next Raise.
	done := make(chan Action, 1)
	go func() {
		act, _, _ := c.Next(context.Background())
		done <- act
	}()
	select {
	case act := <-done:
		t.Fatalf("Next returned %v with the demand met", act)
	case <-time.After(30 * time.Millisecond):
	}
	s.Raise(handed + 1)
	select {
	case act := <-done:
		if act != ActRead {
			t.Fatalf("after Raise: %v, want ActRead", act)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Raise did not wake Next")
	}
}
