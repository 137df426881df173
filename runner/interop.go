package runner

import (
	"fmt"
	"path/filepath"

	"github.com/trajflow/trajflow/config"

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

// provisionInterop opens the optional interop sinks of the kept rows
// (NeMo Gym JSONL and an Arrow IPC stream) for the committer, which
// writes the kept rows to them and closes or aborts them.
func (r *run) provisionInterop() error {
	cfg := r.cfg
	// What is not committed is dropped at the end: the open files of the
	// writers and the interop sinks.
	r.closeChecked(r.commit.abort)
	if cfg.Output.JSONL {
		f, err := jsonl.CreateNext(filepath.Join(cfg.Output.Dir, schema.JSONLDir), schema.JSONLPrefix, schema.JSONLExt)
		if err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
		// The file is an output like any other: a parameter named like a
		// secret is written redacted.
		params, _ := config.RedactValue([]string{"generate", "params"}, map[string]any(cfg.Generate.Params)).(map[string]any)
		f.Overrides(params, cfg.Repeat.SeedConfigured())
		r.commit.interop = append(r.commit.interop, namedSink{"output.jsonl", f})
	}
	if cfg.Output.ArrowStream != "" {
		w, err := arrowipc.Create(cfg.Output.ArrowStream, schema.Schema(), r.opts.Alloc)
		if err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
		r.commit.interop = append(r.commit.interop, namedSink{"output.arrow_stream", w})
	}
	return nil
}
