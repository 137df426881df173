package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/loop"
)

// TestCancelGroup cancels one group while its trajectory waits on the
// model: it resolves as cancelled at once, and every other trajectory
// finishes as usual.
func TestCancelGroup(t *testing.T) {
	defer leak.Check(t)()
	model := &echoModel{slow: 3, release: make(chan struct{})} // never released
	env := &turnsEnv{turns: 2}
	var l *loop.Loop
	built := make(chan struct{})
	go func() {
		<-built
		for l.Admitted() < 10 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		l.CancelGroup(pipeline.GroupKey{TaskIndex: 3})
	}()
	out, err := run(t, context.Background(), model, env, 2, loop.Options{GenWorkers: 4, EnvWorkers: 2, MaxInflight: 100}, rollouts(10), func(x *loop.Loop) { l = x; close(built) })
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 10 {
		t.Fatalf("%d rollouts out, want 10", len(out))
	}
	for _, r := range out {
		want := pipeline.StatusOK
		if r.Task.Index == 3 {
			want = pipeline.StatusCancelled
		}
		if r.Status != want {
			t.Errorf("%s: status %s, want %s", r, r.Status, want)
		}
	}
}
