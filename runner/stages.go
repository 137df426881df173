package runner

import (
	"github.com/reugn/go-streams"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/lines"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/groups"
	"github.com/trajflow/trajflow/stages/loop"
	"github.com/trajflow/trajflow/stages/repeat"
	"github.com/trajflow/trajflow/stages/template"
)

// ClassTooLarge is the error class of the rollouts of a group whose rows
// hold more text than one record batch can (groups.ClassTooLarge).
const ClassTooLarge = groups.ClassTooLarge

// maxRecordBytes is the most text a record batch holds; tests lower it.
var maxRecordBytes = collate.MaxRecordBytes

// wire adds the run's stages to g, each built by its own package, and
// connects them in one chain, checked: source → template → repeat →
// loop (generate ⇄ envstep) → groups → collate → commit.
func (r *run) wire(g *pipeline.Graph) error {
	cfg, ctl, cont := r.cfg, r.flow.ctl, r.opts.continuous()
	src := groups.NewSource(g, ctl, groups.SourceOptions{
		Config: cfg.Groups, Input: r.built.Source, Done: r.done, Unserved: cont.Unserved,
		Staleness: cont.Staleness, Stopping: r.stopper.Began(), Observer: r.stats, Fail: r.fail,
	})
	var sessions loop.Sessions
	if r.built.Gateway != nil {
		sessions = r.built.Gateway
	}
	r.flow.loop = loop.New(g, "loop", r.built.Generator, r.built.Stepper, loop.Options{
		Sessions:   sessions,
		GenWorkers: cfg.Generate.Concurrency, EnvWorkers: cfg.Env.TotalConcurrency(), MaxInflight: cfg.Groups.MaxRollouts,
		Timeout: cfg.Env.Timeout.D(), TimeoutOf: r.built.Stepper.Timeout, Buffer: 64,
		SampleRetries: cfg.Groups.SampleRetries, Renew: r.built.Expander.Renew,
	})
	grouped := groups.NewStage(g, ctl, groups.StageOptions{
		Routing:   groups.Routing{Config: cfg.Groups, Filtered: cfg.Output.Filtered, Steps: cfg.Output.Steps},
		Committer: r.commit, Observer: r.stats, Redact: r.built.Red.String,
		Failed:      r.failed,
		CheckErrors: func() { _ = r.checkErrorRate(false) }, // best effort: not final; over the limit it stops the run itself
		Stopping:    r.stopper.Stopping, Staleness: cont.Staleness, Unserved: cont.Unserved,
		Size: collate.RowBytes, MaxBytes: maxRecordBytes,
	})
	collated, release := collate.NewStage(g, collate.StageOptions{
		Alloc: r.batchAlloc, BatchRows: cfg.Output.Collate.BatchRows, MaxBytes: maxRecordBytes,
		Keeps: r.commit.Keeps, CommitInterval: cfg.Output.Parquet.CommitInterval.D(),
	})
	r.closers.Add(release)
	// The committer (commit.Committer.Take) writes each batch to its
	// directory's Parquet writer (and the kept rows to the interop
	// sinks), commits on the commit timer's mark, and everything at the
	// end. Its errors read "commit: …".
	sink := pipeline.NewSink(g, "commit", 2, r.commit.Take, r.commit.Close)
	return pipeline.Wire(src, []streams.Flow{
		template.NewStage(g, r.built.Template, rows{r}),
		repeat.NewStage(g, r.built.Expander, cfg.Repeat.N, r.stats.Dispatched),
		r.flow.loop, grouped, collated,
	}, sink)
}

// failed records an error rollout in failures.jsonl.
func (r *run) failed(ro *pipeline.Rollout) error { return r.side.failures.Write(lines.FailureOf(ro)) }

// rows is the run's side of the template stage (template.Rows).
type rows struct{ r *run }

func (x rows) Route(t *pipeline.Task) error { return x.r.cfg.Env.RouteTask(t) }
func (x rows) Agent(env string) bool        { return x.r.built.Stepper.AgentRoute(env) }
func (x rows) Rendered(t *pipeline.Task) error {
	return x.r.side.inputs.Write(t, x.r.cfg.Generate.Params)
}

func (x rows) Abandon(t *pipeline.Task) {
	x.r.flow.ctl.Abandon(t)
	x.r.opts.continuous().Staleness.Abandon()
}

// Bad stops the run for a bad row (source.on_bad_row: error, what
// finished is committed) or records it (skip).
func (x rows) Bad(t *pipeline.Task, reason string, fatal error) error {
	if x.r.cfg.Source.OnBadRow != "skip" {
		x.r.fail(fatal)
		return nil
	}
	return x.r.reject(sources.Reject{Where: t.Source, Raw: t.Raw, Reason: reason})
}
