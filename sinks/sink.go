package sinks

import (
	"context"

	"github.com/apache/arrow/go/v17/arrow"
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
