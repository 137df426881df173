package jsonl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// The config keys of the part files: Key turns them on, RowsKey says
// which directories' rows they hold (RowsKept or RowsAll).
const (
	Key      = "output.jsonl"
	RowsKey  = "output.jsonl_rows"
	RowsKept = "kept"
	RowsAll  = "all"
)

func init() {
	sinks.RegisterPart(sinks.PartSpec{
		Key:   Key,
		On:    func(s sinks.Settings) bool { on, _ := s.Setting(Key); return on == true },
		Keeps: keeps,
		New:   NewParts,
		Pair:  PairParts,
	})
}

// keeps reports whether dest's rows have lines: those of the data
// directory, and with output.jsonl_rows: all every directory's.
func keeps(s sinks.Settings, dest string) bool {
	if dest == schema.DataDir {
		return true
	}
	rows, _ := s.Setting(RowsKey)
	return rows == RowsAll
}

// Parts writes the NeMo Gym JSONL (output.jsonl) beside the Parquet parts,
// a registered sinks.Part: the lines of the rows of a directory's open
// part go to its staged file, which is renamed into place as the part
// commits, before the part (whose rename commits it), and dropped when the
// part is aborted. A resume removes the files left without their part
// (PairParts), so that every committed row has exactly one line.
type Parts struct {
	dir string // OUTPUT/jsonl
	// dests are the directories whose rows have lines (output.jsonl_rows).
	dests map[string]bool
	// params and addSeed are the run's request overrides
	// (Writer.Overrides).
	params  map[string]any
	addSeed bool
	open    map[string]*gymPart
}

var _ sinks.Part = (*Parts)(nil)

// gymPart is the staged file of one directory's open part.
type gymPart struct {
	f *durable.File
	w *Writer // buffered: Close flushes it
}

// NewParts makes OUTPUT/jsonl and returns the Parts writing into it, for
// the run env.Settings configures (output.jsonl_rows, generate.params,
// repeat.add_seed).
func NewParts(env sinks.PartEnv) (sinks.Part, error) {
	dir := filepath.Join(env.Dir, schema.JSONLDir)
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", Key, err)
	}
	g := &Parts{dir: dir, dests: map[string]bool{}, open: map[string]*gymPart{}}
	for _, d := range schema.PartDirs {
		g.dests[d] = keeps(env.Settings, d)
	}
	// The file is an output like any other: Settings gives a parameter
	// named like a secret redacted.
	params, _ := env.Settings.Setting("generate.params")
	g.params, _ = params.(map[string]any)
	addSeed, _ := env.Settings.Setting("repeat.add_seed")
	g.addSeed = addSeed == true
	return g, nil
}

// Stage stages the lines of the groups' rollouts (or, for a batch without
// its groups, of the record's rows) for dest's open part.
func (g *Parts) Stage(ctx context.Context, dest string, rec arrow.Record, groups []*pipeline.Group) error {
	if !g.dests[dest] {
		return nil
	}
	p := g.open[dest]
	if p == nil {
		f, err := durable.Create(filepath.Join(g.dir, schema.JSONLPrefix+dest+schema.JSONLExt), 0o644)
		if err != nil {
			return fmt.Errorf("%s: %w", Key, err)
		}
		w := New(f)
		w.Overrides(g.params, g.addSeed)
		p = &gymPart{f: f, w: w}
		g.open[dest] = p
	}
	var err error
	if len(groups) > 0 {
		err = p.w.WriteGroups(ctx, groups)
	} else if rec != nil && rec.NumRows() > 0 {
		err = p.w.Write(ctx, rec)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", Key, err)
	}
	return nil
}

// Commit renames dest's staged file into place beside the part being
// committed as final (its part number names it), synced first.
func (g *Parts) Commit(dest, final string) error {
	n, ok := sinks.PartNumber(final)
	if !ok {
		return fmt.Errorf("%s: %s is not a part file", Key, final)
	}
	p := g.open[dest]
	delete(g.open, dest)
	if p == nil {
		return nil
	}
	// The file's rename (and its directory's sync) comes before the
	// part's own, so that it survives a crash the part survives.
	err := p.w.Close(context.Background())
	if err == nil {
		err = p.f.CommitAs(filepath.Join(g.dir, schema.GymJSONLName(dest, n)))
	} else {
		err = errors.Join(err, p.f.Abort())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", Key, err)
	}
	return nil
}

// Abort drops dest's staged file.
func (g *Parts) Abort(dest string) error {
	p := g.open[dest]
	if p == nil {
		return nil
	}
	delete(g.open, dest)
	if err := p.f.Abort(); err != nil {
		return fmt.Errorf("%s: %w", Key, err)
	}
	return nil
}

// PairParts removes from OUTPUT/jsonl the staged files of a run that
// stopped, and the files whose part was never committed (a crash between
// the two renames of a commit): their rows are redone. The one-per-run
// files of earlier versions (rollouts-NNNNN.jsonl) are left as they are.
func PairParts(outDir string) error {
	return sinks.PairFiles(outDir, schema.JSONLDir, gymFileOf)
}

// gymFileOf reads the directory and part number a NeMo Gym JSONL file's
// name (schema.GymJSONLName) gives; ok is false for another name.
func gymFileOf(name string) (dest string, n int, ok bool) {
	rest, ok := strings.CutSuffix(name, schema.JSONLExt)
	if !ok {
		return "", 0, false
	}
	rest, ok = strings.CutPrefix(rest, schema.JSONLPrefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	for _, d := range schema.PartDirs {
		if rest[:i] == d {
			return d, n, true
		}
	}
	return "", 0, false
}
