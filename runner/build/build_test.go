package build_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/build"
)

// quickstart is the quickstart example's config writing into a temporary
// directory.
func quickstart(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("../..")
	sets = append([]string{
		"source.path=" + filepath.Join(root, "examples/quickstart/tasks.jsonl"),
		"output.dir=" + t.TempDir(),
		"run.progress=0",
	}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/quickstart/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// walk walks the build steps as a run does, with no output step of its
// own; on an error what was built is closed.
func walk(ctx context.Context, cfg *config.Config) (*build.Components, error) {
	c := build.New(cfg, build.Options{}, build.Hooks{})
	if err := c.Walk(ctx, build.RunStep); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// The build steps give a caller the run's components to drive itself: a
// row read, rendered, expanded, reset and generated through them resolves
// as in a run; a bad config builds nothing.
func TestBuild(t *testing.T) {
	defer leak.Check(t)()
	cfg := quickstart(t)
	b, err := walk(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	task, err := b.Source.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Env.RouteTask(task); err != nil {
		t.Fatal(err)
	}
	if err := b.Template.Render(task); err != nil {
		t.Fatal(err)
	}
	r := b.Expander.Expand(task, 0)[0]
	if err := b.Stepper.Reset(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := b.Generator.Turn(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stepper.Step(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.Status != pipeline.StatusOK || r.NumTurns != 1 || len(r.Messages) < 2 {
		t.Errorf("status %s, %d turns, %d messages (error %q)", r.Status, r.NumTurns, len(r.Messages), r.Error)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	bad := quickstart(t, "env.name=nope")
	if _, err := walk(ctx, bad); err == nil || !strings.Contains(err.Error(), "env.name") {
		t.Fatalf("Build of a bad config: %v, want an env.name problem", err)
	}
	if _, err := os.Stat(bad.Output.Dir); err == nil {
		if entries, _ := os.ReadDir(bad.Output.Dir); len(entries) > 0 {
			t.Errorf("Build wrote into %s", bad.Output.Dir)
		}
	}
}

// The steps a run, validate and serve walk, in their order.
func ExampleSteps() {
	for _, s := range build.Steps {
		fmt.Println(s.Name)
	}
	// Output:
	// config
	// output
	// client
	// preflight
	// batch
	// decorate
	// generator
	// envs
	// gateway
	// template
	// source
	// expander
}
