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
