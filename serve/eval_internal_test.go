package serve

import (
	"context"
	"errors"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner"
)

// TestEvalRunsAtItsVersionFirst: the evaluation's run is at the version
// evaluated and its requests go ahead of training's (EvalPriority).
func TestEvalRunsAtItsVersionFirst(t *testing.T) {
	cfg := &config.Config{}
	cfg.Output.Dir = t.TempDir()
	cfg.Serve.Eval = &config.ServeEval{N: 2, Every: 2}
	e := newEvaluator(context.Background(), cfg, t.Logf)
	var got runner.Options
	stop := errors.New("stop here")
	e.run = func(_ context.Context, _ *config.Config, opts runner.Options) error {
		got = opts
		return stop
	}
	if _, err := e.evaluate(4); !errors.Is(err, stop) {
		t.Fatalf("evaluate: %v", err)
	}
	c := got.Continuous
	if c == nil || c.Policy == nil || c.Policy.Version() != 4 {
		t.Fatalf("the evaluation of version 4 ran with %+v", c)
	}
	if c.Priority == nil || *c.Priority != EvalPriority || EvalPriority >= 0 {
		t.Fatalf("the evaluation's priority %v, want %d, ahead of training's (0 and up)", c.Priority, EvalPriority)
	}
}
