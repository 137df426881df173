package template

import (
	"context"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// Rows is what the template stage asks of the run about a fresh row.
type Rows interface {
	// Route chooses the row's environment route; an error makes it a bad
	// row.
	Route(t *pipeline.Task) error
	// Agent reports whether env is an agent's route: an agent writes its
	// own prompts, its rows are not rendered.
	Agent(env string) bool
	// Abandon gives back the place of a row that will not be sampled.
	Abandon(t *pipeline.Task)
	// Bad handles a bad row (source.on_bad_row): under skip it records the
	// reject and returns nil, or the writer's error; under error it stops
	// the run with fatal and returns nil.
	Bad(t *pipeline.Task, reason string, fatal error) error
	// Rendered records the row's rendered request (inputs.jsonl).
	Rendered(t *pipeline.Task) error
}

// NewStage is the template stage: it chooses a fresh job's environment
// route and renders its prompt with t; a row without a route, or that it
// cannot render, is a bad row. Jobs of tasks sampled again pass as they
// are.
func NewStage(g *pipeline.Graph, t *Template, rows Rows) *pipeline.Stage[pipeline.Job, pipeline.Job] {
	return pipeline.NewStage(g, "template", 1, 16, func(ctx context.Context, j pipeline.Job) ([]pipeline.Job, error) {
		if !j.Fresh {
			return []pipeline.Job{j}, nil
		}
		// A row whose route names no environment is a bad row too.
		err := rows.Route(j.Task)
		fatal := err
		// A row whose request cannot be sent (Task.Invalid) is an error
		// row: nothing to render.
		// An agent writes its own prompts: its rows are not rendered.
		if err == nil && j.Task.Invalid == "" && !rows.Agent(j.Task.Env) && (t.Enabled() || len(j.Task.Messages) == 0) {
			if err = t.Render(j.Task); err != nil {
				fatal = fmt.Errorf("template: %w", err)
			}
		}
		if err != nil {
			rows.Abandon(j.Task)
			return nil, rows.Bad(j.Task, err.Error(), fatal)
		}
		if err := rows.Rendered(j.Task); err != nil {
			return nil, err
		}
		return []pipeline.Job{j}, nil
	})
}
