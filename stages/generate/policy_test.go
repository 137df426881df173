package generate

import (
	"context"
	"testing"
	"time"
)

func TestPolicy(t *testing.T) {
	var none *Policy
	if none.Version() != 0 {
		t.Fatal("a nil policy is version 0")
	}
	if err := none.Wait(context.Background()); err != nil {
		t.Fatal("a nil policy never waits:", err)
	}

	p := NewPolicy(1)
	if err := p.SetVersion(0); err == nil {
		t.Fatal("a lower version was accepted")
	}
	ch := p.Changed()
	if err := p.SetVersion(2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("SetVersion did not signal a change")
	}
	if p.Version() != 2 {
		t.Fatalf("version %d, want 2", p.Version())
	}
	if err := p.Pause("later"); err == nil {
		t.Fatal("an unknown pause mode was accepted")
	}
	if err := p.Pause(PauseAbort); err != nil {
		t.Fatal(err)
	}
	if paused, mode := p.Paused(); !paused || mode != PauseAbort {
		t.Fatalf("Paused() = %v %q", paused, mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Wait(ctx); err == nil {
		t.Fatal("Wait returned while paused")
	}
	woke := make(chan error, 1)
	go func() { woke <- p.Wait(context.Background()) }()
	p.Resume()
	select {
	case err := <-woke:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Resume did not wake a waiter")
	}
	p.Resume() // a no-op
	if paused, _ := p.Paused(); paused {
		t.Fatal("still paused after Resume")
	}
}
