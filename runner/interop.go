package runner

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/arrowipc"
	"github.com/trajflow/trajflow/sinks/jsonl"
)

// namedSink is an optional sink of the kept rows and the config key that
// asked for it (for errors).
type namedSink struct {
	key  string
	sink sinks.Sink
}

// provisionInterop opens the optional interop sinks of the kept rows:
// NeMo Gym JSONL and an Arrow IPC stream.
func (r *run) provisionInterop() error {
	cfg := r.cfg
	if cfg.Output.JSONL {
		f, err := jsonl.CreateNext(filepath.Join(cfg.Output.Dir, JSONLDir), "rollouts-", ".jsonl")
		if err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
		r.interop = append(r.interop, namedSink{"output.jsonl", f})
		r.closeChecked(f.Abort)
	}
	if cfg.Output.ArrowStream != "" {
		w, err := arrowipc.Create(cfg.Output.ArrowStream, schema.Schema(), r.opts.Alloc)
		if err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
		r.interop = append(r.interop, namedSink{"output.arrow_stream", w})
		r.closeChecked(w.Abort)
	}
	return nil
}

func (r *run) writeInterop(ctx context.Context, rec arrow.Record) error {
	for _, s := range r.interop {
		if err := s.sink.Write(ctx, rec); err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
	}
	return nil
}

func (r *run) closeInterop(ctx context.Context) error {
	for _, s := range r.interop {
		if err := s.sink.Close(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
	}
	return nil
}
