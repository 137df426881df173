package commit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/images"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// Committer is a run's commit path, in one place: the Parquet writer of
// each output directory, the part sinks whose files are committed with
// each part (sinks.RegisterPart: the step rows of output.steps, the NeMo
// Gym JSONL of output.jsonl, the OpenAI Batch files of
// output.openai_batch), the data-URL images stored before the rows that
// name them (output.images: reference), the interop sink of the kept rows
// (output.arrow_stream), and the upload of what each commit wrote to
// object storage. The order is fixed:
//
//   - a group's images are on disk before its rows reach a sink
//     (Externalize, in the groups stage);
//   - a part's rows are staged in its part sinks' files before the part's
//     writer gets them, and those files are renamed into place (in
//     registration order) before the part, whose rename commits them all;
//     an aborted part drops them; a resume removes those a crash left
//     without their part (Pair);
//   - the directories commit in Dirs order;
//   - on object storage the upload follows every write, commit and close,
//     and storage.Mirror.Push sends the side files first and the data
//     part files last; a data file counts as committed once uploaded.
type Committer struct {
	// dir is the (local) output directory.
	dir string
	// options are the options of every Parquet writer, made once.
	options parquet.Options
	writers map[string]*parquet.Writer
	// opened lists the writers in the order they were opened.
	opened []*parquet.Writer
	// images stores data-URL images by reference; nil with output.images
	// inline.
	images *images.Store
	// interop are the optional sinks of the kept rows (OpenInterop).
	interop []namedSink
	// parts are the run's part sinks (those registered that are on), in
	// registration order.
	parts []openPart
	hooks Hooks

	// dirty is set when a file was committed locally and is not uploaded
	// yet; pending are the data files among them, counted once uploaded.
	dirty   bool
	pending []committedFile
	// openGroups are the groups (task index, attempt) of the data
	// directory's open file, counted into its commit.
	openGroups map[[2]int64]struct{}
}

// openPart is a part sink the run writes.
type openPart struct {
	key   string
	part  sinks.Part
	keeps map[string]bool // the directories whose parts have its files
}

// Hooks are what the run hears of, and adds to, each commit.
type Hooks struct {
	// Committed hears of a data file once it is committed (on object
	// storage: once uploaded), with its rows and the groups they are of;
	// it may be nil.
	Committed func(path string, rows, groups int)
	// Upload sends what changed locally to object storage; nil for a
	// local output directory.
	Upload func(ctx context.Context) error
}

// Dirs are the directories of Parquet output, in commit order.
var Dirs = schema.PartDirs

// Open makes the commit path of cfg's output directory, which exists and
// whose lock the caller holds. It first removes what a crashed run left
// half-written (the Parquet directories' temporary files, staged images);
// popts are the options of every Parquet writer. The interop sinks are
// opened later (OpenInterop); the caller closes (Close) or aborts (Abort)
// the result.
func Open(cfg *config.Config, popts parquet.Options, h Hooks) (*Committer, error) {
	dir := cfg.Output.Dir
	for _, dest := range Dirs {
		if err := parquet.RemoveStale(filepath.Join(dir, dest), ""); err != nil {
			return nil, err
		}
	}
	c := &Committer{dir: dir, options: popts, hooks: h}
	env := sinks.PartEnv{Dir: dir, Metadata: popts.Metadata, Compression: cfg.Output.Parquet.Compression, Settings: cfg}
	for _, spec := range sinks.Parts() {
		if !spec.On(cfg) {
			continue
		}
		part, err := spec.New(env)
		if err != nil {
			return nil, errors.Join(err, c.abortParts())
		}
		p := openPart{key: spec.Key, part: part, keeps: map[string]bool{}}
		for _, dest := range Dirs {
			p.keeps[dest] = spec.Keeps(cfg, dest)
		}
		c.parts = append(c.parts, p)
	}
	if cfg.Output.Images == "reference" {
		images, err := openImages(filepath.Join(dir, schema.ImagesDir))
		if err != nil {
			return nil, err
		}
		c.images = images
	}
	return c, nil
}

// openImages is the image store of dir, without the staged files a
// crashed run left (schema.IsTemp: internal/durable's .NAME.tmp-RANDOM,
// and the .tmp-image-RANDOM of earlier versions).
func openImages(dir string) (*images.Store, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() && schema.IsTemp(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		}
	}
	return images.New(dir), nil
}

// Batch is a record batch for one output directory, or the commit
// timer's mark (collate.Batch, what the collate stage emits).
type Batch = collate.Batch

// Keeps reports whether a batch of dest carries its groups: whether a
// part sink of the run has files beside dest's parts (the step rows of
// output.steps: the data directory; NeMo Gym lines of output.jsonl: the
// data directory, every directory with output.jsonl_rows: all; OpenAI
// Batch lines of output.openai_batch: every directory).
func (c *Committer) Keeps(dest string) bool {
	for _, p := range c.parts {
		if p.keeps[dest] {
			return true
		}
	}
	return false
}

// Pair makes the files of cfg's part sinks agree with the committed parts
// before a resume reads them (sinks.PartSpec.Pair): a crash between a
// commit's renames left files without their part, whose rows the resumed
// run redoes.
func Pair(cfg *config.Config) error {
	for _, spec := range sinks.Parts() {
		if spec.On(cfg) {
			if err := spec.Pair(cfg.Output.Dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// Take hands a batch to its directory's writer (Write), or on the commit
// timer's mark commits every open file (Commit); it releases the record.
func (c *Committer) Take(ctx context.Context, b Batch) error {
	if b.Commit {
		return c.Commit(ctx)
	}
	defer b.Rec.Release()
	return c.Write(ctx, b.Dest, b.Rec, b.Groups)
}

// committedFile is a data file committed in the staging directory.
type committedFile struct {
	path         string
	rows, groups int
}

// Externalize stores the images of a group's messages and points the
// messages at them, before the group's rows go to the sinks.
func (c *Committer) Externalize(g *pipeline.Group) error {
	if c.images == nil {
		return nil
	}
	for _, m := range g.Rollouts {
		if err := c.images.Externalize(m.Messages); err != nil {
			return err
		}
	}
	return nil
}

// writer returns the Parquet writer of an output directory, opening it on
// first use.
func (c *Committer) writer(dest string) (*parquet.Writer, error) {
	if w := c.writers[dest]; w != nil {
		return w, nil
	}
	popts := c.options
	popts.OnCommit = func(path string, rows int) { c.onCommit(dest, path, rows) }
	// The part sinks' files are renamed into place before the part, in
	// registration order: the part's rename commits them all.
	var parts []sinks.Part
	for _, p := range c.parts {
		if p.keeps[dest] {
			parts = append(parts, p.part)
		}
	}
	if len(parts) > 0 {
		popts.BeforeRename = func(final string) error {
			for _, p := range parts {
				if err := p.Commit(dest, final); err != nil {
					return err
				}
			}
			return nil
		}
		popts.OnAbort = func() error {
			var errs []error
			for _, p := range parts {
				errs = append(errs, p.Abort(dest))
			}
			return errors.Join(errs...)
		}
	}
	w, err := parquet.New(filepath.Join(c.dir, dest), popts)
	if err != nil {
		return nil, err
	}
	if c.writers == nil {
		c.writers = map[string]*parquet.Writer{}
	}
	c.writers[dest] = w
	c.opened = append(c.opened, w)
	return w, nil
}

// onCommit hears of each file a writer committed.
func (c *Committer) onCommit(dest, path string, rows int) {
	c.dirty = true
	if dest != schema.DataDir {
		return
	}
	groups := len(c.openGroups)
	clear(c.openGroups)
	if c.hooks.Upload != nil {
		// Committed once uploaded (push counts it then).
		c.pending = append(c.pending, committedFile{path, rows, groups})
		return
	}
	c.committed(path, rows, groups)
}

// countGroups adds the groups of rec's rows to those of the data
// directory's open file (a record is never split across files).
func (c *Committer) countGroups(rec arrow.Record) {
	if c.openGroups == nil {
		c.openGroups = map[[2]int64]struct{}{}
	}
	tasks, ok := rec.Column(schema.ColTaskIndex).(*array.Int64)
	attempts, ok2 := rec.Column(schema.ColAttempt).(*array.Int32)
	if !ok || !ok2 {
		return
	}
	for i := range int(rec.NumRows()) {
		c.openGroups[[2]int64{tasks.Value(i), int64(attempts.Value(i))}] = struct{}{}
	}
}

// Write writes a record batch to its directory's writer: for the data
// directory the interop sinks get it (or its groups) first, then the part
// sinks stage its rows (a commit the record triggers takes them along),
// then the directory's writer.
func (c *Committer) Write(ctx context.Context, dest string, rec arrow.Record, groups []*pipeline.Group) error {
	w, err := c.writer(dest)
	if err != nil {
		return err
	}
	if dest == schema.DataDir {
		for _, s := range c.interop {
			// A sink that takes groups gets the record's groups (carried
			// with output.jsonl), not the record.
			var err error
			if gs, ok := s.sink.(sinks.GroupSink); ok && len(groups) > 0 {
				err = gs.WriteGroups(ctx, groups)
			} else {
				err = s.sink.Write(ctx, rec)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", s.key, err)
			}
		}
	}
	for _, p := range c.parts {
		if !p.keeps[dest] {
			continue
		}
		// Staged before the rows: a commit the record triggers takes them
		// along.
		if err := p.part.Stage(ctx, dest, rec, groups); err != nil {
			return errors.Join(err, w.Abort())
		}
	}
	if dest == schema.DataDir {
		c.countGroups(rec)
	}
	if err := w.Write(ctx, rec); err != nil {
		return err
	}
	return c.push(ctx)
}

// Commit commits every directory's open file (the commit timer), in
// order, and uploads them.
func (c *Committer) Commit(ctx context.Context) error {
	for _, dest := range Dirs {
		if w := c.writers[dest]; w != nil {
			if err := w.Commit(ctx); err != nil {
				return err
			}
		}
	}
	return c.push(ctx)
}

// Close closes the interop sinks, then commits and closes every
// directory's writer, in order, and uploads what they wrote.
func (c *Committer) Close(ctx context.Context) error {
	for _, s := range c.interop {
		if err := s.sink.Close(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
	}
	for _, dest := range Dirs {
		if w := c.writers[dest]; w != nil {
			if err := w.Close(ctx); err != nil {
				return err
			}
		}
	}
	return c.push(ctx)
}

// Abort drops what is not committed: the open files of the writers (in
// reverse order), the part sinks' staged files, the interop sinks' staged
// output. It
// returns every error met: a file it could not remove is left behind.
func (c *Committer) Abort() error {
	var errs []error
	for i := len(c.opened) - 1; i >= 0; i-- {
		errs = append(errs, c.opened[i].Abort())
	}
	errs = append(errs, c.abortParts())
	for i := len(c.interop) - 1; i >= 0; i-- {
		if a, ok := c.interop[i].sink.(sinks.Aborter); ok {
			errs = append(errs, a.Abort())
		}
	}
	return errors.Join(errs...)
}

// abortParts drops what the part sinks staged for every directory.
func (c *Committer) abortParts() error {
	var errs []error
	for _, p := range c.parts {
		for _, dest := range Dirs {
			errs = append(errs, p.part.Abort(dest))
		}
	}
	return errors.Join(errs...)
}

// push uploads what was committed since the last upload, and counts the
// data files among it.
func (c *Committer) push(ctx context.Context) error {
	if c.hooks.Upload == nil || !c.dirty {
		return nil
	}
	if err := c.hooks.Upload(ctx); err != nil {
		return err
	}
	c.dirty = false
	for _, f := range c.pending {
		c.committed(f.path, f.rows, f.groups)
	}
	c.pending = nil
	return nil
}

// PushFinal uploads every file that changed locally (metrics.json, the
// side files) at the end of the run.
func (c *Committer) PushFinal(ctx context.Context) error {
	if c.hooks.Upload == nil {
		return nil
	}
	c.dirty = true
	return c.push(ctx)
}

// committed tells the hook of a committed data file.
func (c *Committer) committed(path string, rows, groups int) {
	if c.hooks.Committed != nil {
		c.hooks.Committed(path, rows, groups)
	}
}
