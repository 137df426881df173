package commit

import (
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow/memory"

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

// OpenInterop opens the optional interop sinks of the kept rows (NeMo
// Gym JSONL and an Arrow IPC stream), which the committer writes the kept
// rows to and closes or aborts with its writers. alloc is the Arrow
// stream's allocator.
func (c *Committer) OpenInterop(cfg *config.Config, alloc memory.Allocator) error {
	if cfg.Output.JSONL {
		f, err := jsonl.CreateNext(filepath.Join(cfg.Output.Dir, schema.JSONLDir), schema.JSONLPrefix, schema.JSONLExt)
		if err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
		// The file is an output like any other: a parameter named like a
		// secret is written redacted.
		params, _ := config.RedactValue([]string{"generate", "params"}, map[string]any(cfg.Generate.Params)).(map[string]any)
		f.Overrides(params, cfg.Repeat.AddSeed)
		c.interop = append(c.interop, namedSink{"output.jsonl", f})
	}
	if cfg.Output.ArrowStream != "" {
		w, err := arrowipc.Create(cfg.Output.ArrowStream, schema.Schema(), alloc)
		if err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
		c.interop = append(c.interop, namedSink{"output.arrow_stream", w})
	}
	return nil
}
