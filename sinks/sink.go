package sinks

import (
	"context"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
)

// Sink receives record batches of rollout rows, in the output schema of
// package schema, and commits them.
//
// Write must not keep rec past its return unless it Retains it; the caller
// releases rec afterwards. Close commits everything written and frees the
// sink; after a failed Write or Close the sink is unusable. Calls are not
// concurrent: one goroutine owns a sink.
type Sink interface {
	Write(ctx context.Context, rec arrow.Record) error
	Close(ctx context.Context) error
}

// Aborter is a Sink that can be dropped without committing: Abort removes
// what was not committed yet and frees the sink. It is safe after Close.
// Its error says what could not be closed or removed (a staged file left
// behind); the sink is freed all the same.
type Aborter interface {
	Abort() error
}

// GroupSink is a Sink that also takes the groups a record is collated from
// in place of the record: WriteGroups(ctx, gs) writes what Write would of
// the record package collate makes of gs (the same rows, in the same
// order), without building or decoding a record. The committer hands the
// kept groups to a GroupSink. It must not keep gs past its return.
type GroupSink interface {
	Sink
	WriteGroups(ctx context.Context, gs []*pipeline.Group) error
}
