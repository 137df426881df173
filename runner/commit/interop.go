package commit

import (
	"fmt"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/config"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/arrowipc"
)

// namedSink is an optional sink of the kept rows and the config key that
// asked for it (for errors).
type namedSink struct {
	key  string
	sink sinks.Sink
}

// OpenInterop opens the optional interop sink of the kept rows (an Arrow
// IPC stream; the NeMo Gym JSONL is a part sink, sinks/jsonl's Parts),
// which the committer writes the kept rows to and closes or aborts with
// its writers. alloc is the Arrow
// stream's allocator.
func (c *Committer) OpenInterop(cfg *config.Config, alloc memory.Allocator) error {
	if cfg.Output.ArrowStream != "" {
		w, err := arrowipc.Create(cfg.Output.ArrowStream, schema.Schema(), alloc)
		if err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
		c.interop = append(c.interop, namedSink{"output.arrow_stream", w})
	}
	return nil
}
