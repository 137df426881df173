package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/images"
	"github.com/trajflow/trajflow/sinks/parquet"
)

// committer is a run's commit path, in one place: the Parquet writer of
// each output directory, the step rows committed with each data file
// (output.steps), the data-URL images stored before the rows that name
// them (output.images: reference), the interop sinks of the kept rows
// (output.jsonl, output.arrow_stream), and the upload of what each commit
// wrote to object storage. The order is fixed:
//
//   - a group's images are on disk before its rows reach a sink
//     (externalize, in the groups stage);
//   - a data file's step rows are written before its rows, and the steps
//     file is renamed into place before the data file, whose rename
//     commits both (a resume removes a steps file left without its data
//     file);
//   - the directories commit in outputDirs order;
//   - on object storage the upload follows every write, commit and close,
//     and storage.Mirror.Push sends the side files first and the data
//     part files last; a data file counts as committed once uploaded.
type committer struct {
	// dir is the (local) output directory.
	dir string
	// options are the options of every Parquet writer, made once.
	options parquet.Options
	// steps writes the kept groups' step rows; nil without output.steps.
	steps *parquet.StepWriter
	// stepsOpen opens steps with the data writer (output.steps).
	stepsOpen func(metadata map[string]string) (*parquet.StepWriter, error)
	writers   map[string]*parquet.Writer
	// opened lists the writers in the order they were opened.
	opened []*parquet.Writer
	// images stores data-URL images by reference; nil with output.images
	// inline.
	images *images.Store
	// interop are the optional sinks of the kept rows.
	interop []namedSink
	// batch writes OpenAI's Batch output and error files beside each
	// directory's parts (output.openai_batch); nil without.
	batch *batchFiles
	hooks commitHooks

	// dirty is set when a file was committed locally and is not uploaded
	// yet; pending are the data files among them, counted once uploaded.
	dirty   bool
	pending []committedFile
}

// commitHooks are what the run hears of, and adds to, each commit.
type commitHooks struct {
	// committed counts a data file in the summary once it is committed
	// (on object storage: once uploaded).
	committed func(path string, rows int)
	// upload sends what changed locally to object storage; nil for a
	// local output directory.
	upload func(ctx context.Context) error
}

// committedFile is a data file committed in the staging directory.
type committedFile struct {
	path string
	rows int
}

// externalize stores the images of a group's messages and points the
// messages at them, before the group's rows go to the sinks.
func (c *committer) externalize(g *pipeline.Group) error {
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
func (c *committer) writer(dest string) (*parquet.Writer, error) {
	if w := c.writers[dest]; w != nil {
		return w, nil
	}
	popts := c.options
	popts.OnCommit = func(path string, rows int) { c.onCommit(dest, path, rows) }
	if dest == schema.DataDir && c.stepsOpen != nil {
		sw, err := c.stepsOpen(popts.Metadata)
		if err != nil {
			return nil, err
		}
		c.steps = sw
		// The steps file is renamed into place first: the data file's
		// rename commits both.
		popts.BeforeRename = func(final string) error { return sw.Commit(filepath.Base(final)) }
		popts.OnAbort = sw.Abort
	}
	if c.batch != nil {
		// The OpenAI Batch files of the part are renamed into place
		// before it, as the steps file is: the part's rename commits them.
		before, abort := popts.BeforeRename, popts.OnAbort
		popts.BeforeRename = func(final string) error {
			if before != nil {
				if err := before(final); err != nil {
					return err
				}
			}
			return c.batch.commit(dest, final)
		}
		popts.OnAbort = func() error {
			var err error
			if abort != nil {
				err = abort()
			}
			return errors.Join(err, c.batch.abort(dest))
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
func (c *committer) onCommit(dest, path string, rows int) {
	c.dirty = true
	if dest != schema.DataDir {
		return
	}
	if c.hooks.upload != nil {
		// Committed once uploaded (upload counts it then).
		c.pending = append(c.pending, committedFile{path, rows})
		return
	}
	c.hooks.committed(path, rows)
}

// write writes a record batch to its directory's writer: for the data
// directory the interop sinks get it first, then its groups' step rows
// (a commit the record triggers takes them along), then the data writer.
func (c *committer) write(ctx context.Context, dest string, rec arrow.Record, groups []*pipeline.Group) error {
	w, err := c.writer(dest)
	if err != nil {
		return err
	}
	if dest == schema.DataDir {
		for _, s := range c.interop {
			if err := s.sink.Write(ctx, rec); err != nil {
				return fmt.Errorf("%s: %w", s.key, err)
			}
		}
		if c.steps != nil {
			if err := c.steps.WriteGroups(groups); err != nil {
				return errors.Join(err, w.Abort())
			}
		}
	}
	if c.batch != nil {
		// Staged before the rows, as the step rows: a commit the record
		// triggers takes them along.
		if err := c.batch.add(dest, groups); err != nil {
			return errors.Join(err, w.Abort())
		}
	}
	if err := w.Write(ctx, rec); err != nil {
		return err
	}
	return c.push(ctx)
}

// commit commits every directory's open file (the commit timer), in
// order, and uploads them.
func (c *committer) commit(ctx context.Context) error {
	for _, dest := range outputDirs {
		if w := c.writers[dest]; w != nil {
			if err := w.Commit(ctx); err != nil {
				return err
			}
		}
	}
	return c.push(ctx)
}

// close closes the interop sinks, then commits and closes every
// directory's writer, in order, and uploads what they wrote.
func (c *committer) close(ctx context.Context) error {
	for _, s := range c.interop {
		if err := s.sink.Close(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
	}
	for _, dest := range outputDirs {
		if w := c.writers[dest]; w != nil {
			if err := w.Close(ctx); err != nil {
				return err
			}
		}
	}
	return c.push(ctx)
}

// abort drops what is not committed: the open files of the writers (in
// reverse order), the steps file, the interop sinks' staged output. It
// returns every error met: a file it could not remove is left behind.
func (c *committer) abort() error {
	var errs []error
	for i := len(c.opened) - 1; i >= 0; i-- {
		errs = append(errs, c.opened[i].Abort())
	}
	if c.steps != nil {
		errs = append(errs, c.steps.Abort())
	}
	for i := len(c.interop) - 1; i >= 0; i-- {
		if a, ok := c.interop[i].sink.(sinks.Aborter); ok {
			errs = append(errs, a.Abort())
		}
	}
	return errors.Join(errs...)
}

// push uploads what was committed since the last upload, and counts the
// data files among it.
func (c *committer) push(ctx context.Context) error {
	if c.hooks.upload == nil || !c.dirty {
		return nil
	}
	if err := c.hooks.upload(ctx); err != nil {
		return err
	}
	c.dirty = false
	for _, f := range c.pending {
		c.hooks.committed(f.path, f.rows)
	}
	c.pending = nil
	return nil
}

// pushFinal uploads every file that changed locally (metrics.json, the
// side files) at the end of the run.
func (c *committer) pushFinal(ctx context.Context) error {
	if c.hooks.upload == nil {
		return nil
	}
	c.dirty = true
	return c.push(ctx)
}
