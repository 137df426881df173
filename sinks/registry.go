package sinks

import (
	"context"
	"fmt"
	"sync"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
)

// Part is a file committed with each Parquet part file of the output
// directories it keeps: the rows of a directory's open part are staged in
// it as they are written, it is renamed into place before the part (whose
// rename commits both), and it is dropped when the part is aborted. A
// resume removes the files a crash left without their part (PartSpec.Pair),
// so that every committed row is in exactly one of them, and only once.
//
// The committer (runner/commit) calls a Part from one goroutine, in this
// order for each part: Stage (any number of times), then Commit or Abort.
type Part interface {
	// Stage stages the rows of rec, a batch of dest's rows, for dest's
	// open part; groups are the groups rec is collated from, where the
	// committer carries them (it always does for a registered part). It
	// must not keep rec or groups past its return.
	Stage(ctx context.Context, dest string, rec arrow.Record, groups []*pipeline.Group) error
	// Commit makes what was staged for dest durable under the name of the
	// part being committed as final (schema.PartName's file, a path):
	// synced, renamed, its directory synced. It comes before the part's
	// own rename.
	Commit(dest, final string) error
	// Abort drops what was staged for dest; it is safe when nothing was.
	Abort(dest string) error
}

// PartEnv is what a part's constructor gets of the run.
type PartEnv struct {
	// Dir is the (local) output directory.
	Dir string
	// Metadata is the key-value metadata of every Parquet part.
	Metadata map[string]string
	// Compression is the Parquet parts' codec (output.compression).
	Compression string
	// Settings reads the run's config.
	Settings Settings
}

// Settings reads a run's config by key, as written in a config file
// ("output.jsonl", "generate.params"); ok is false for an unknown key.
// config.Config implements it.
type Settings interface {
	Setting(key string) (v any, ok bool)
}

// PartSpec registers a part sink under its config key.
type PartSpec struct {
	// Key is the config key that turns it on ("output.jsonl"): errors
	// are prefixed with it.
	Key string
	// On reports whether a run of these settings writes it.
	On func(s Settings) bool
	// Keeps reports whether the parts of an output directory (schema's
	// DataDir, FilteredDir, ...) have it, for a run of these settings:
	// the committer carries those directories' groups to Stage.
	Keeps func(s Settings, dest string) bool
	// New opens it for a run that writes it (On). A crashed run's
	// staged files go later (Pair).
	New func(env PartEnv) (Part, error)
	// Pair makes outDir's files of this sink agree with its committed
	// parts before a resume: it removes the staged files a stopped run
	// left and the files whose part was never committed (a crash between
	// the two renames of a commit). It runs before a run that writes the
	// sink (On) reads what is committed; a missing directory is no error.
	Pair func(outDir string) error
}

// parts is the registry of part sinks, in registration order.
var parts struct {
	mu    sync.RWMutex
	order []PartSpec
}

// RegisterPart registers a part sink. It panics when the key is empty or
// taken, or a function is missing: registration happens in init, and
// these are programming errors.
func RegisterPart(s PartSpec) {
	parts.mu.Lock()
	defer parts.mu.Unlock()
	if s.Key == "" || s.On == nil || s.Keeps == nil || s.New == nil || s.Pair == nil {
		panic(fmt.Sprintf("sinks: RegisterPart(%q): a key and On, Keeps, New and Pair are required", s.Key))
	}
	for _, p := range parts.order {
		if p.Key == s.Key {
			panic(fmt.Sprintf("sinks: part sink %q registered twice", s.Key))
		}
	}
	parts.order = append(parts.order, s)
}

// Parts returns the registered part sinks, in registration order (the
// order the committer stages, commits and aborts them in).
func Parts() []PartSpec {
	parts.mu.RLock()
	defer parts.mu.RUnlock()
	return append([]PartSpec(nil), parts.order...)
}
