package collate

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Batch is a record batch for one output directory, or (Commit) the
// commit timer's mark: the writers commit their open files. It releases
// its record when the graph drops it unconsumed.
type Batch struct {
	Dest   string
	Rec    arrow.Record
	Commit bool
	// Groups are the groups Rec holds, when their step rows or OpenAI
	// Batch lines go with it (StageOptions.Keeps).
	Groups []*pipeline.Group
}

// Release releases the batch's record.
func (b Batch) Release() {
	if b.Rec != nil {
		b.Rec.Release()
	}
}

// StageOptions size the collate stage.
type StageOptions struct {
	Alloc     memory.Allocator
	BatchRows int
	// MaxBytes is the most text a record batch holds (MaxRecordBytes
	// when <= 0).
	MaxBytes int64
	// Keeps reports whether a batch of dest carries its groups (the
	// committer's part sinks need them).
	Keeps func(dest string) bool
	// CommitInterval is output.commit_interval: on its timer the partial
	// batches go out, then a Commit mark; 0: none.
	CommitInterval time.Duration
}

// NewStage is the collate stage: it turns each directory's groups into
// record batches, never splitting a group. release frees the collators
// once the graph is done.
func NewStage(g *pipeline.Graph, o StageOptions) (stage *pipeline.Stage[pipeline.Routed, Batch], release func()) {
	collators := map[string]*Collator{}
	// pending are the groups buffered in a collator whose step rows
	// (output.steps, data directory) or OpenAI Batch lines
	// (output.openai_batch, every directory) go with its next record.
	pending := map[string][]*pipeline.Group{}
	take := func(dest string) []*pipeline.Group {
		gs := pending[dest]
		delete(pending, dest)
		return gs
	}
	release = func() {
		for _, c := range collators {
			c.Release()
		}
	}
	stage = pipeline.NewStage(g, "collate", 1, 2, func(ctx context.Context, rg pipeline.Routed) ([]Batch, error) {
		c := collators[rg.Dest]
		if c == nil {
			c = New(o.Alloc, o.BatchRows)
			c.SetBytes(0, o.MaxBytes)
			collators[rg.Dest] = c
		}
		var out []Batch
		if !c.Fits(rg.Group) {
			if c.Rows() == 0 {
				// The groups stage cut what it could; the task's own row
				// is still too large.
				return nil, fmt.Errorf("%s: a group of task %d holds %d bytes of text, more than one record batch can (%d)",
					rg.Dest, rg.Group.Rollouts[0].Task.Index, GroupBytes(rg.Group), c.MaxBytes())
			}
			// The buffered rows go first: a record never holds more text
			// than an Arrow column can.
			out = append(out, Batch{Dest: rg.Dest, Rec: c.Flush(), Groups: take(rg.Dest)})
		}
		if o.Keeps(rg.Dest) {
			pending[rg.Dest] = append(pending[rg.Dest], rg.Group)
		}
		if rec := c.Add(rg.Group); rec != nil {
			out = append(out, Batch{Dest: rg.Dest, Rec: rec, Groups: take(rg.Dest)})
		}
		return out, nil
	})
	flush := func(ctx context.Context) ([]Batch, error) {
		var out []Batch
		for _, dest := range schema.PartDirs {
			if c := collators[dest]; c != nil {
				if rec := c.Flush(); rec != nil {
					out = append(out, Batch{Dest: dest, Rec: rec, Groups: take(dest)})
				}
			}
		}
		return out, nil
	}
	// output.commit_interval: on the timer, the partial batches go out and
	// the sinks commit their open files, so that a kill -9 loses at most
	// that much finished work.
	stage = stage.OnFlush(flush).OnTick(o.CommitInterval, func(ctx context.Context) ([]Batch, error) {
		out, err := flush(ctx)
		return append(out, Batch{Commit: true}), err
	})
	return stage, release
}
