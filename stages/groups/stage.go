package groups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Observer hears what the source and groups stages see (the run's
// statistics).
type Observer interface {
	// Read counts a task read, Resumed one an earlier run did.
	Read()
	Resumed()
	// Resolve counts a resolved rollout, Group a decided group, CutOff a
	// group a stop cut off.
	Resolve(r *pipeline.Rollout)
	Group(g *pipeline.Group)
	CutOff(g *pipeline.Group)
	// Refail counts an ok or error rollout failed again with class.
	Refail(r *pipeline.Rollout, class, msg string)
}

// Input is the input's tasks in order: io.EOF at its end.
type Input interface {
	Next(ctx context.Context) (*pipeline.Task, error)
}

// Committed is the work earlier runs committed (resume.Committed).
type Committed interface {
	Skip(task int64, maxAttempts int, resample bool) (skip bool, attempt int)
	SkipDropped(task int64, maxAttempts int, resample bool) (skip bool, attempt int)
	KeptAttempt(task int64) (kept, last int, ok bool)
}

// SourceOptions are what the source stage reads and tells.
type SourceOptions struct {
	Config Config
	Input  Input
	// Done is what earlier runs committed; Unserved (nil: none) what a
	// service expects of them (Unserved.Resume).
	Done     Committed
	Unserved *Unserved
	// Staleness (nil: none) gates admission; Stopping closes when the
	// run's stop begins.
	Staleness *Staleness
	Stopping  <-chan struct{}
	Observer  Observer
	// Fail stops the run for a fatal error (a bad row or page).
	Fail func(error)
}

// NewSource is the source stage: it hands out the groups to sample as ctl
// allows: tasks read from the input (less those earlier runs committed)
// and dropped tasks sampled again.
func NewSource(g *pipeline.Graph, ctl *Controller, o SourceOptions) *pipeline.Source[Job] {
	resample := o.Config.Resample == "same_task"
	return pipeline.NewSource(g, "source", 16, func(ctx context.Context, emit func(Job) error) error {
		for {
			act, j, err := ctl.Next(ctx)
			if err != nil || act == ActDone {
				return err
			}
			if act == ActRead {
				t, err := o.Input.Next(ctx)
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
					o.Fail(err)
					continue
				}
				ctl.ReadDone(t)
				o.Observer.Read()
				skip, attempt := o.Unserved.Resume(t, o.Done, o.Config.MaxAttempts, resample)
				if skip {
					o.Observer.Resumed()
					ctl.Abandon(t)
					continue
				}
				j = Job{Task: t, Attempt: attempt, Fresh: true}
				ctl.Attempt(t.Index, attempt)
			}
			if !o.Staleness.AdmitUntil(ctx, o.Stopping) {
				ctl.Abandon(j.Task)
				continue
			}
			if err := emit(j); err != nil {
				return err
			}
		}
	})
}

// Committer is what the groups stage asks of the commit path.
type Committer interface {
	// Externalize stores a group's bytes (images) before its rows go on.
	Externalize(g *pipeline.Group) error
}

// StageOptions are what the groups stage reads and tells.
type StageOptions struct {
	// Routing names each decided group's output directory.
	Routing   Routing
	Committer Committer
	Observer  Observer
	// Redact removes secrets from an error text.
	Redact func(string) string
	// Failed records an error rollout (failures.jsonl); CheckErrors then
	// checks the run's error rate.
	Failed      func(r *pipeline.Rollout) error
	CheckErrors func()
	// Stopping reports whether the run's stop began.
	Stopping func() bool
	// Staleness and Unserved: nil, or a service's (runner.Continuous).
	Staleness *Staleness
	Unserved  *Unserved
	// Size is a row's text (collate.RowBytes) and MaxBytes the most a
	// record batch holds: a group over it fails (TooLarge).
	Size     func(r *pipeline.Rollout) int64
	MaxBytes int64
}

// NewStage is the groups stage: it waits for each group's n rollouts,
// applies the keep rule, tells ctl, and routes the group to its output
// directory.
func NewStage(g *pipeline.Graph, ctl *Controller, o StageOptions) *pipeline.Stage[*pipeline.Rollout, pipeline.Routed] {
	collector := NewCollector()
	texts := TooLarge{Size: o.Size, Max: o.MaxBytes, texts: map[pipeline.GroupKey]int64{}}
	rule := NewRule(o.Routing.Config)
	// A group with a failed member is never kept: it goes to errors/ and a
	// resumed run redoes it (run.resume_errors), so data/ holds every
	// rollout at most once.
	rule.DropErrors = true
	// decide routes each decided group to its output directory.
	decide := func(ds []Decision) ([]pipeline.Routed, error) {
		var out []pipeline.Routed
		for _, d := range ds {
			dest, ok := o.Routing.Route(d)
			o.Observer.Group(d.Group)
			if !ok {
				continue
			}
			// The bytes are on disk before the rows that name them go
			// to the sinks.
			if err := o.Committer.Externalize(d.Group); err != nil {
				return nil, err
			}
			o.Unserved.HoldKept(d.Group, dest)
			out = append(out, pipeline.Routed{Group: d.Group, Dest: dest})
		}
		return out, nil
	}
	return pipeline.NewStage(g, "groups", 1, 16, func(ctx context.Context, ro *pipeline.Rollout) ([]pipeline.Routed, error) {
		ro.Error = o.Redact(ro.Error) // servers and environments may echo a URL or a key
		ctl.RolloutDone(ro)
		o.Observer.Resolve(ro)
		if ro.Status == pipeline.StatusError {
			if err := o.Failed(ro); err != nil {
				return nil, err
			}
			o.CheckErrors()
		}
		texts.Add(ro, collector.Held(ro.GroupKey()))
		gr, err := collector.Add(ro)
		if err != nil || gr == nil {
			return nil, err
		}
		text := texts.Done(gr.Key)
		if o.Stopping() && CutOff(gr) {
			// Unfinished work of a stop: not committed, redone on resume.
			o.Observer.CutOff(gr)
			ctl.CutOff()
			o.Staleness.Abandon()
			return nil, nil
		}
		if err := texts.Fail(gr, text, o.Observer, o.Failed); err != nil {
			return nil, err
		}
		rule.Apply(gr)
		requeue := o.Staleness.Finish(gr)
		ds, err := decide(ctl.GroupDone(gr, ro.Task))
		if requeue {
			ctl.Requeue(Job{Task: ro.Task, Attempt: gr.Key.Attempt + 1})
		}
		return ds, err
	}).OnFlush(func(ctx context.Context) ([]pipeline.Routed, error) {
		out, held := ctl.Flush()
		for _, gr := range held {
			// Finished, but behind a task a stop cut off (groups.order:
			// task): not committed, redone on resume.
			o.Observer.CutOff(gr)
		}
		return decide(out)
	})
}

// CutOff reports whether a stop cut g off: a member was cancelled. Such a
// group is not committed; a resumed run redoes it.
func CutOff(g *pipeline.Group) bool {
	for _, ro := range g.Rollouts {
		if ro.Status == pipeline.StatusCancelled {
			return true
		}
	}
	return false
}
