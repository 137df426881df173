package serve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// serve.max_staleness 0 with steps of 2 groups: at policy version 0 the
// gate admits (0+0+1)×2 groups, so a second step waits for the trainer's
// next version; after POST /v1/policy {"version": 1} it is served, and
// every group of it was admitted at version 1.
func TestServeMaxStaleness(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "serve.max_staleness=0", "serve.step_groups=2", "serve.buffer_steps=0"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, first.Number); err != nil {
		t.Fatal(err)
	}
	// The gate is full at version 0: no third group is admitted.
	short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = c.Next(short, 2, client.FormatParquet)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second step at version 0 under max_staleness 0: %v, want it to wait", err)
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	second, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if second.Groups != 2 {
		t.Fatalf("step %d holds %d groups", second.Number, second.Groups)
	}
	for _, v := range second.Versions {
		if v != 1 {
			t.Fatalf("step %d holds tokens of versions %v, want only 1 (max_staleness 0)", second.Number, second.Versions)
		}
	}
	status, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.PolicyVersion != 1 {
		t.Fatalf("status policy version %d", status.PolicyVersion)
	}
}

// waitStatus polls the status until ok holds (the service generates in
// the background), failing when ctx ends first.
func waitStatus(ctx context.Context, t *testing.T, c *client.Client, what string, ok func(client.Status) bool) client.Status {
	t.Helper()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok(*st) {
			return *st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; status: %d queued, demand %d", what, ctx.Err(), st.QueuedGroups, st.Demand)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Under serve.max_staleness the look-ahead is what the staleness bound
// allows, not serve.buffer_steps: before any request the service
// generates (0 + 1 + 1) × 3 kept groups, no more, and a new policy
// version admits 3 more.
func TestServeAheadToStalenessBound(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "serve.max_staleness=1", "serve.step_groups=3"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := waitStatus(ctx, t, c, "6 groups queued at version 0", func(st client.Status) bool {
		return st.QueuedGroups >= 6 && st.InGeneration == 0 && st.InEnvironment == 0
	})
	if st.QueuedGroups != 6 || st.Demand != 6 {
		t.Fatalf("at version 0: %d groups queued, demand %d; want 6 and 6 ((0+1+1)×3)", st.QueuedGroups, st.Demand)
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(ctx, t, c, "9 groups queued at version 1", func(st client.Status) bool {
		return st.QueuedGroups >= 9 && st.InGeneration == 0 && st.InEnvironment == 0
	})
	if st.QueuedGroups != 9 || st.Demand != 9 {
		t.Fatalf("at version 1: %d groups queued, demand %d; want 9 and 9", st.QueuedGroups, st.Demand)
	}
}

// Without max_staleness the look-ahead holds at least the kept groups
// that keep generate.concurrency busy (16 slots, groups of 4: 4 groups),
// from before the first request; after a step of 2 it is 2 in steps and
// 4 ahead.
func TestServeLookAheadFillsConcurrency(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := waitStatus(ctx, t, c, "4 groups queued before any request", func(st client.Status) bool { return st.QueuedGroups >= 4 })
	if st.Demand != 4 {
		t.Fatalf("before any request: demand %d, want 4 (16 slots ÷ groups of 4)", st.Demand)
	}
	step, err := c.Next(ctx, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if step.Groups != 2 {
		t.Fatalf("step of %d groups, want 2", step.Groups)
	}
	st = waitStatus(ctx, t, c, "the demand after a step", func(st client.Status) bool { return st.Demand >= 6 })
	if st.Demand != 6 {
		t.Fatalf("after a step of 2: demand %d, want 6 (2 in steps + 4 ahead)", st.Demand)
	}
}
