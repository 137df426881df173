package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/reugn/go-streams"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/commit"
	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/stages/loop"
	"github.com/trajflow/trajflow/stages/repeat"
)

// The stages of one run's graph, each built from its component and wired
// by execute: source → template → repeat → loop → groups → collate → sink.

// sourceStage hands out groups to sample as the controller allows: tasks
// read from the input (less those a resumed run already committed) and
// dropped tasks sampled again.
func (r *run) sourceStage(g *pipeline.Graph) streams.Source {
	cfg, ctl := r.cfg, r.flow.ctl
	resample := cfg.Groups.Resample == "same_task"
	return pipeline.NewSource(g, "source", 16, func(ctx context.Context, emit func(groups.Job) error) error {
		for {
			act, j, err := ctl.Next(ctx)
			if err != nil || act == groups.ActDone {
				return err
			}
			if act == groups.ActRead {
				t, err := r.built.Source.Next(ctx)
				if errors.Is(err, io.EOF) {
					ctl.ReadDone(nil)
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					// A bad row or page: stop admitting, commit what finished.
					ctl.ReadDone(nil)
					if !strings.HasPrefix(err.Error(), "source: ") {
						err = fmt.Errorf("source: %w", err)
					}
					r.fail(err)
					continue
				}
				ctl.ReadDone(t)
				r.stats.Read()
				skip, attempt := r.done.Skip(t.Index, cfg.Groups.MaxAttempts, resample)
				if skip {
					skip, attempt = r.resumeUnserved(t, resample)
				}
				if skip {
					r.stats.Resumed()
					ctl.Abandon(t)
					continue
				}
				j = groups.Job{Task: t, Attempt: attempt, Fresh: true}
				ctl.Attempt(t.Index, attempt)
			}
			if !r.admitStale(ctx, j) {
				continue
			}
			if err := emit(j); err != nil {
				return err
			}
		}
	})
}

// templateStage chooses a fresh task's environment route and renders its
// prompt; a row without a route or that it cannot render is a bad row
// (source.on_bad_row).
func (r *run) templateStage(g *pipeline.Graph) streams.Flow {
	return pipeline.NewStage(g, "template", 1, 16, func(ctx context.Context, j groups.Job) ([]groups.Job, error) {
		if !j.Fresh {
			return []groups.Job{j}, nil
		}
		// A row whose route names no environment is a bad row too.
		err := r.cfg.Env.RouteTask(j.Task)
		fatal := err
		// A row whose request cannot be sent (Task.Invalid) is an error
		// row: nothing to render.
		if err == nil && j.Task.Invalid == "" && (r.built.Template.Enabled() || len(j.Task.Messages) == 0) {
			if err = r.built.Template.Render(j.Task); err != nil {
				fatal = fmt.Errorf("template: %w", err)
			}
		}
		if err != nil {
			r.flow.ctl.Abandon(j.Task)
			r.staleAbandon()
			if r.cfg.Source.OnBadRow != "skip" {
				// Stop admitting, commit what finished.
				r.fail(fatal)
				return nil, nil
			}
			return nil, r.reject(sources.Reject{Where: j.Task.Source, Raw: j.Task.Raw, Reason: err.Error()})
		}
		if err := r.side.inputs.Write(j.Task, r.cfg.Generate.Params); err != nil {
			return nil, err
		}
		return []groups.Job{j}, nil
	})
}

// repeatStage expands a group's task into its n rollouts.
func (r *run) repeatStage(g *pipeline.Graph) streams.Flow {
	return pipeline.NewStage(g, "repeat", 1, r.cfg.Repeat.N, func(ctx context.Context, j groups.Job) ([]*pipeline.Rollout, error) {
		rs := r.built.Expander.Expand(j.Task, j.Attempt)
		r.stats.Dispatched(len(rs))
		return rs, nil
	})
}

// loopStage runs each rollout's turns: generate ⇄ envstep.
func (r *run) loopStage(g *pipeline.Graph) streams.Flow {
	cfg := r.cfg
	step := r.built.Stepper
	r.flow.loop = loop.New(g, "loop", r.built.Generator, step, loop.Options{
		GenWorkers: cfg.Generate.Concurrency, EnvWorkers: cfg.Env.TotalConcurrency(), MaxInflight: cfg.Groups.MaxRollouts,
		Timeout: cfg.Env.Timeout.D(), TimeoutOf: step.Timeout, Buffer: 64,
		SampleRetries: cfg.Groups.SampleRetries,
		Renew: func(f *pipeline.Rollout) *pipeline.Rollout {
			fresh := r.built.Expander.Expand(f.Task, f.Attempt)[f.RolloutIndex]
			fresh.Seed = repeat.RetrySeed(f.Seed, f.Retries+1)
			return fresh
		},
	})
	return r.flow.loop
}

// groupsStage waits for each group's n rollouts, applies the keep rule,
// tells the controller, and routes the group to its output directory.
func (r *run) groupsStage(g *pipeline.Graph) streams.Flow {
	cfg := r.cfg
	collector := groups.NewCollector()
	texts := groupText{}
	rule := groups.NewRule(cfg.Groups)
	// A group with a failed member is never kept: it goes to errors/ and a
	// resumed run redoes it (run.resume_errors), so data/ holds every
	// rollout at most once.
	rule.DropErrors = true
	routing := groups.Routing{Config: cfg.Groups, Filtered: cfg.Output.Filtered, Steps: cfg.Output.Steps}
	// decide routes each decided group to its output directory.
	decide := func(ds []groups.Decision) ([]routed, error) {
		var out []routed
		for _, d := range ds {
			dest, ok := routing.Route(d)
			r.stats.Group(d.Group)
			if !ok {
				continue
			}
			// The bytes are on disk before the rows that name them go
			// to the sinks.
			if err := r.commit.Externalize(d.Group); err != nil {
				return nil, err
			}
			r.holdUnserved(d.Group, dest)
			out = append(out, routed{d.Group, dest})
		}
		return out, nil
	}
	return pipeline.NewStage(g, "groups", 1, 16, func(ctx context.Context, ro *pipeline.Rollout) ([]routed, error) {
		ro.Error = r.built.Red.String(ro.Error) // servers and environments may echo a URL or a key
		r.flow.ctl.RolloutDone(ro)
		r.stats.Resolve(ro)
		if ro.Status == pipeline.StatusError {
			if err := r.side.failures.Write(lines.FailureOf(ro)); err != nil {
				return nil, err
			}
			_ = r.checkErrorRate(false) // best effort: not final; over the limit it stops the run itself
		}
		texts.add(ro, collector.Held(ro.GroupKey()))
		gr, err := collector.Add(ro)
		if err != nil || gr == nil {
			return nil, err
		}
		text := texts.done(gr.Key)
		if r.cutOff(gr) {
			// Unfinished work of a stop: not committed, redone on resume.
			r.stats.CutOff(gr)
			r.flow.ctl.CutOff()
			r.staleAbandon()
			return nil, nil
		}
		if err := r.failTooLarge(gr, text); err != nil {
			return nil, err
		}
		rule.Apply(gr)
		requeue := r.staleDone(gr)
		ds, err := decide(r.flow.ctl.GroupDone(gr, ro.Task))
		if requeue {
			r.flow.ctl.Requeue(groups.Job{Task: ro.Task, Attempt: gr.Key.Attempt + 1})
		}
		return ds, err
	}).OnFlush(func(ctx context.Context) ([]routed, error) {
		out, held := r.flow.ctl.Flush()
		for _, gr := range held {
			// Finished, but behind a task a stop cut off (groups.order:
			// task): not committed, redone on resume.
			r.stats.CutOff(gr)
		}
		return decide(out)
	})
}

// collateStage turns each directory's groups into record batches.
func (r *run) collateStage(g *pipeline.Graph) streams.Flow {
	collators := map[string]*collate.Collator{}
	// pending are the groups buffered in a collator whose step rows
	// (output.steps, data directory) or OpenAI Batch lines
	// (output.openai_batch, every directory) go with its next record.
	pending := map[string][]*pipeline.Group{}
	take := func(dest string) []*pipeline.Group {
		gs := pending[dest]
		delete(pending, dest)
		return gs
	}
	r.closers.add(func() {
		for _, c := range collators {
			c.Release()
		}
	})
	stage := pipeline.NewStage(g, "collate", 1, 2, func(ctx context.Context, rg routed) ([]commit.Batch, error) {
		c := collators[rg.dest]
		if c == nil {
			c = collate.New(r.batchAlloc, r.cfg.Output.Collate.BatchRows)
			c.SetBytes(0, maxRecordBytes)
			collators[rg.dest] = c
		}
		var out []commit.Batch
		if !c.Fits(rg.group) {
			if c.Rows() == 0 {
				// failTooLarge cut what it could; the task's own row is
				// still too large.
				return nil, fmt.Errorf("%s: a group of task %d holds %d bytes of text, more than one record batch can (%d)",
					rg.dest, rg.group.Rollouts[0].Task.Index, collate.GroupBytes(rg.group), c.MaxBytes())
			}
			// The buffered rows go first: a record never holds more text
			// than an Arrow column can.
			out = append(out, commit.Batch{Dest: rg.dest, Rec: c.Flush(), Groups: take(rg.dest)})
		}
		if r.commit.Keeps(rg.dest) {
			pending[rg.dest] = append(pending[rg.dest], rg.group)
		}
		if rec := c.Add(rg.group); rec != nil {
			out = append(out, commit.Batch{Dest: rg.dest, Rec: rec, Groups: take(rg.dest)})
		}
		return out, nil
	})
	flush := func(ctx context.Context) ([]commit.Batch, error) {
		var out []commit.Batch
		for _, dest := range commit.Dirs {
			if c := collators[dest]; c != nil {
				if rec := c.Flush(); rec != nil {
					out = append(out, commit.Batch{Dest: dest, Rec: rec, Groups: take(dest)})
				}
			}
		}
		return out, nil
	}
	// output.commit_interval: on the timer, the partial batches go out and
	// the sinks commit their open files, so that a kill -9 loses at most
	// that much finished work.
	return stage.OnFlush(flush).OnTick(r.cfg.Output.Parquet.CommitInterval.D(), func(ctx context.Context) ([]commit.Batch, error) {
		out, err := flush(ctx)
		return append(out, commit.Batch{Commit: true}), err
	})
}

// sinkStage hands each batch to the committer (commit.Committer.Take):
// written to its directory's Parquet writer (and the kept rows to the
// interop sinks), committed on the commit timer's mark, and everything
// at the end. Its errors read "commit: …" (the Parquet writer's own say
// "parquet: …"; before, this stage was named parquet too, and a part's
// failure read "parquet: parquet: …").
func (r *run) sinkStage(g *pipeline.Graph) streams.Sink {
	return pipeline.NewSink(g, "commit", 2, r.commit.Take, r.commit.Close)
}
