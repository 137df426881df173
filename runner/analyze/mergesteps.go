package analyze

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks/images"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// outputRoot is the output directory of a data part file
// (ROOT/data/part-N.parquet), "" for a file elsewhere.
func outputRoot(file string) string {
	dir := filepath.Dir(file)
	if filepath.Base(dir) != schema.DataDir {
		return ""
	}
	return filepath.Dir(dir)
}

// stepsOf returns the steps file of each data file (ROOT/steps/part-N for
// ROOT/data/part-N), or nil when none has one. Some with and some
// without is an error naming one of each.
func stepsOf(files []string) ([]string, error) {
	var out []string
	var with, without string
	for _, f := range files {
		p := ""
		if root := outputRoot(f); root != "" {
			p = filepath.Join(root, schema.StepsDir, filepath.Base(f))
		}
		if _, err := os.Stat(p); p == "" || err != nil {
			if without == "" {
				without = f
			}
			continue
		}
		if with == "" {
			with = f
		}
		out = append(out, p)
	}
	switch {
	case with == "":
		return nil, nil
	case without != "":
		return nil, fmt.Errorf("analyze: merge: %s has step rows (%s) but %s has none: merge inputs that all have steps/ (output.steps) or none",
			with, filepath.Join(outputRoot(with), schema.StepsDir, filepath.Base(with)), without)
	}
	return out, nil
}

// checkStepsPaired refuses to add files to an output directory whose
// existing data files would not agree with the new ones on step rows:
// with steps, every existing data file has its steps file; without, there
// is no steps file.
func checkStepsPaired(outDir string, existing, steps bool) error {
	dataDir, stepsDir := filepath.Join(outDir, schema.DataDir), filepath.Join(outDir, schema.StepsDir)
	switch {
	case steps && existing:
		if err := pqsink.PairSteps(dataDir, stepsDir); err != nil {
			return fmt.Errorf("analyze: merge: the inputs have step rows but %s does not agree: %w", outDir, err)
		}
	case !steps:
		if m, _ := filepath.Glob(filepath.Join(globEscape(stepsDir), schema.PartGlob)); len(m) > 0 {
			return fmt.Errorf("analyze: merge: %s has step rows (%s) but the inputs have none: merge into another directory", outDir, m[0])
		}
	}
	return nil
}

// copyImages copies the images of the inputs' output directories into
// dst, before any row naming them is written.
func copyImages(files []string, dst string, res *MergeResult) error {
	seen := map[string]bool{}
	for _, f := range files {
		root := outputRoot(f)
		if root == "" || seen[root] {
			continue
		}
		seen[root] = true
		n, had, err := images.CopyDir(filepath.Join(root, schema.ImagesDir), dst)
		if err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
		res.Images += n
		res.ImagesHad += had
	}
	return nil
}

// stepCopier copies the step rows of the input files into the steps
// files of the output files holding their groups: as the rows of an input
// data file are written, it learns which output file holds each group;
// when an output file is committed, the step rows of its groups are
// copied (the steps files list their groups in the data files' order) and
// its steps file committed under its name.
type stepCopier struct {
	w *pqsink.StepWriter
	r *pqsink.StepReader
	// data is the input data file r pairs with; groups the output file
	// index of each of its groups written so far.
	data   string
	groups map[pqsink.StepGroup]int
	last   pqsink.StepGroup
}

func newStepCopier(dir, compression string, meta map[string]string) (*stepCopier, error) {
	w, err := pqsink.NewStepWriter(dir, compression, meta)
	if err != nil {
		return nil, err
	}
	return &stepCopier{w: w}, nil
}

// open starts on the steps file of an input data file.
func (c *stepCopier) open(steps, data string) error {
	r, err := pqsink.OpenSteps(steps)
	if err != nil {
		return err
	}
	c.r, c.data, c.groups, c.last = r, data, map[pqsink.StepGroup]int{}, pqsink.StepGroup{TaskIndex: -1}
	return nil
}

// wrote records that the rows of rec went into output file file.
func (c *stepCopier) wrote(rec arrow.Record, file int) {
	cols := groupColumns(rec)
	for i := 0; i < int(rec.NumRows()); i++ {
		g := cols.group(i)
		if g == c.last {
			continue
		}
		g.RunID = strings.Clone(g.RunID)
		c.groups[g], c.last = file, g
	}
}

// route copies the step rows of the groups written into output files up
// to file; with all, every row left (the data file is read: each must
// belong to a group written).
func (c *stepCopier) route(file int, all bool) error {
	for {
		g, rollout, step, ok, err := c.r.Next()
		if err != nil || !ok {
			return err
		}
		at, seen := c.groups[g]
		switch {
		case !seen && !all:
			return nil // a group of a later output file
		case !seen:
			return fmt.Errorf("%s: step %d of run_id %q, task_index %d, attempt %d, rollout_index %d has no trajectory in %s",
				c.r.Path(), step, g.RunID, g.TaskIndex, g.Attempt, rollout, c.data)
		case at < file:
			return fmt.Errorf("%s: the step rows of run_id %q, task_index %d, attempt %d come after those of a later group of %s: the steps file is not in its data file's order",
				c.r.Path(), g.RunID, g.TaskIndex, g.Attempt, c.data)
		}
		if err := c.r.CopyTo(c.w); err != nil {
			return err
		}
	}
}

// commit is called as output file file is committed under name: its step
// rows are copied and committed first.
func (c *stepCopier) commit(file int, name string) error {
	if c.r != nil {
		if err := c.route(file, false); err != nil {
			return err
		}
	}
	return c.w.Commit(name)
}

// finish copies the step rows left once the current input data file is
// read (they go with the open output file, file) and closes its steps
// file.
func (c *stepCopier) finish(file int) error {
	err := c.route(file, true)
	err = errors.Join(err, c.r.Close())
	c.r, c.groups = nil, nil
	return err
}

// close drops what is not committed and returns what failed to.
func (c *stepCopier) close() error {
	err := c.w.Abort()
	if c.r != nil {
		err = errors.Join(err, c.r.Close())
		c.r = nil
	}
	return err
}
