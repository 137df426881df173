package commit

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks/jsonl"
)

// gymFiles writes the NeMo Gym JSONL (output.jsonl) beside the Parquet
// parts, as batchFiles writes the OpenAI Batch files: the lines of the
// rows of a directory's open part go to its staged file, which is renamed
// into place as the part commits, before the part (whose rename commits
// it), and dropped when the part is aborted. A resume removes the files
// left without their part (PairGymFiles), so that every committed row has
// exactly one line.
type gymFiles struct {
	dir string // OUTPUT/jsonl
	// dests are the directories whose rows have lines (output.jsonl_rows).
	dests map[string]bool
	// params and addSeed are the run's request overrides
	// (jsonl.Writer.Overrides).
	params  map[string]any
	addSeed bool
	open    map[string]*gymPart
}

// gymPart is the staged file of one directory's open part.
type gymPart struct {
	f *durable.File
	w *jsonl.Writer // buffered: Close flushes it
}

func newGymFiles(cfg *config.Config) (*gymFiles, error) {
	dir := filepath.Join(cfg.Output.Dir, schema.JSONLDir)
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output.jsonl: %w", err)
	}
	g := &gymFiles{dir: dir, dests: map[string]bool{schema.DataDir: true}, open: map[string]*gymPart{}}
	if cfg.Output.JSONLRows == config.JSONLAll {
		for _, d := range Dirs {
			g.dests[d] = true
		}
	}
	// The file is an output like any other: a parameter named like a
	// secret is written redacted.
	g.params, _ = config.RedactValue([]string{"generate", "params"}, map[string]any(cfg.Generate.Params)).(map[string]any)
	g.addSeed = cfg.Repeat.AddSeed
	return g, nil
}

// keeps reports whether dest's rows have lines.
func (g *gymFiles) keeps(dest string) bool { return g.dests[dest] }

// add stages the lines of the groups' rollouts (or, for a batch without
// its groups, of the record's rows) for dest's open part.
func (g *gymFiles) add(ctx context.Context, dest string, rec arrow.Record, groups []*pipeline.Group) error {
	if !g.dests[dest] {
		return nil
	}
	p := g.open[dest]
	if p == nil {
		f, err := durable.Create(filepath.Join(g.dir, schema.JSONLPrefix+dest+schema.JSONLExt), 0o644)
		if err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
		w := jsonl.New(f)
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
		return fmt.Errorf("output.jsonl: %w", err)
	}
	return nil
}

// commit renames dest's staged file into place beside the part being
// committed as final (its part number names it), synced first.
func (g *gymFiles) commit(dest, final string) error {
	n, ok := partNumber(filepath.Base(final))
	if !ok {
		return fmt.Errorf("output.jsonl: %s is not a part file", final)
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
		return fmt.Errorf("output.jsonl: %w", err)
	}
	return nil
}

// abort drops dest's staged file.
func (g *gymFiles) abort(dest string) error {
	p := g.open[dest]
	if p == nil {
		return nil
	}
	delete(g.open, dest)
	if err := p.f.Abort(); err != nil {
		return fmt.Errorf("output.jsonl: %w", err)
	}
	return nil
}

// PairGymFiles removes from OUTPUT/jsonl the staged files of a run that
// stopped, and the files whose part was never committed (a crash between
// the two renames of a commit): their rows are redone. The one-per-run
// files of earlier versions (rollouts-NNNNN.jsonl) are left as they are.
func PairGymFiles(outDir string) error {
	return pairPartFiles(outDir, schema.JSONLDir, gymFileOf)
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
	for _, d := range Dirs {
		if rest[:i] == d {
			return d, n, true
		}
	}
	return "", 0, false
}
