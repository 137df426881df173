package analyze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// MergeOptions configure Merge. Zero values take the defaults.
type MergeOptions struct {
	// FileRows is the number of rows after which an output file is
	// committed, at the next group boundary. Default 100000.
	FileRows int
	// RowGroupRows is the most rows per row group. Default 4096.
	RowGroupRows int
	// Compression is zstd (default), snappy, gzip or none.
	Compression string
	// EvenFiles spreads the rows evenly over ceil(rows / FileRows) files
	// (each cut at the group boundary nearest its share) instead of
	// filling each file to FileRows and leaving the rest to the last.
	EvenFiles bool
	// TargetFileBytes, when > 0, aims at files of about this many bytes:
	// the rows are spread evenly over max(1, round(input bytes /
	// TargetFileBytes)) files, the input bytes being the sizes of the input
	// Parquet files (files written with the same compression come out
	// close to that size). It takes the place of FileRows.
	TargetFileBytes int64
	// Force adds files to an output directory that is not empty (part
	// files already in its data directory stay; new files are numbered
	// after them). The files are then committed one by one into it, not
	// as one dataset.
	Force bool
	// AllowDuplicates merges rows whose (run_id, task_index, attempt,
	// rollout_index) key appears more than once instead of failing.
	AllowDuplicates bool
	// Allocator allocates the read buffers. Default memory.DefaultAllocator.
	Allocator memory.Allocator
	// BatchRows is the number of rows per record batch read. Default 4096.
	BatchRows int
	// OnCommit, when set, is called after each output file is committed
	// (into the temporary directory, when the dataset is committed whole).
	OnCommit func(path string, rows int)
}

// MergeResult says what Merge did.
type MergeResult struct {
	// Inputs are the Parquet files read, in order.
	Inputs []string
	// Files are the files committed, in order.
	Files []string
	// Rows is the number of rows written.
	Rows int64
	// Duplicates is the number of rows whose key had been seen before (in
	// an input or in a part file already in the output directory).
	Duplicates int64
	// Metadata is the key-value metadata written into every output file.
	Metadata map[string]string
	// Steps is true when the inputs had step rows (output.steps): each
	// file of Files has its steps file, of the same name, in outDir/steps.
	Steps bool
	// Images is the number of image files copied into outDir/images (the
	// inputs' images/, output.images: reference); ImagesHad those already
	// there (the same content-addressed name).
	Images, ImagesHad int
}

// Merge copies every row of the Parquet files in inputs (output
// directories, sharded runs' roots or files, see ResolveFiles), unchanged
// and in order, into fewer, larger part files in outDir/data. A file is cut
// only between groups (rows of one run_id, task_index and attempt), once it
// holds at least opts.FileRows rows, or, with opts.EvenFiles or
// opts.TargetFileBytes, at the group boundary nearest its even share.
//
// Companions go with the rows. When the input data files have steps files
// (output.steps: a data/part-N.parquet with its steps/part-N.parquet), each
// output file gets the step rows of its own groups in outDir/steps, under
// its name, committed before it; an input without its steps file among
// inputs with them is refused, naming it. The images of the inputs'
// output directories (images/, content-addressed) are copied into
// outDir/images before any row naming them.
//
// The dataset is committed whole: Merge writes into a temporary directory
// beside outDir and renames it to outDir at the end, so a reader sees no
// outDir, or every file of it; if anything fails, nothing is left. outDir
// must not exist or be empty, unless opts.Force: then the files are added
// to outDir/data one by one, each committed atomically by sinks/parquet.
//
// Before writing anything Merge checks every input: its schema, that it
// is in the schema version merge writes (schema.Version; a file of schema
// version 1 is refused, alone or with others, naming the file and its
// version: v1 rows hold token ids per message, which cannot be rewritten
// as spans), and, unless opts.AllowDuplicates, that no (task_index, attempt,
// rollout_index) key repeats within a run_id. It refuses an input inside
// outDir/data. Key-value metadata is kept where all inputs agree; a key
// with several values is written as a JSON list of the distinct values,
// sorted.
func Merge(ctx context.Context, inputs []string, outDir string, opts MergeOptions) (*MergeResult, error) {
	if err := checkMergeOptions(&opts, outDir); err != nil {
		return nil, err
	}
	files, err := ResolveFiles(inputs)
	if err != nil {
		return nil, err
	}
	out, err := inspectOutDir(outDir, opts.Force)
	if err != nil {
		return nil, err
	}
	if err := checkNotInside(files, out.dataDir); err != nil {
		return nil, err
	}

	res := &MergeResult{Inputs: files}
	steps, err := stepsOf(files)
	if err != nil {
		return nil, err
	}
	res.Steps = steps != nil
	if err := checkStepsPaired(outDir, len(out.existing) > 0, res.Steps); err != nil {
		return nil, err
	}
	metas, rows, err := checkInputs(ctx, out.existing, files, &opts, res)
	if err != nil {
		return nil, err
	}
	res.Metadata = mergeMetadata(metas)
	plan := planCuts(files, rows, &opts)
	write := func(dir string) error {
		if err := copyImages(files, filepath.Join(dir, schema.ImagesDir), res); err != nil {
			return err
		}
		return copyRows(ctx, files, steps, dir, &opts, plan, res)
	}
	if !out.whole {
		if err := write(outDir); err != nil {
			return nil, err
		}
		return res, nil
	}
	if err := commitWhole(outDir, out.entries != nil, write); err != nil {
		return nil, err
	}
	for i, f := range res.Files {
		res.Files[i] = filepath.Join(out.dataDir, filepath.Base(f))
	}
	return res, nil
}

// checkMergeOptions refuses negative sizes and an empty outDir, and sets
// the default FileRows.
func checkMergeOptions(opts *MergeOptions, outDir string) error {
	if opts.FileRows < 0 {
		return fmt.Errorf("analyze: merge file_rows %d: must be >= 0", opts.FileRows)
	}
	if opts.TargetFileBytes < 0 {
		return fmt.Errorf("analyze: merge target file size %d: must be >= 0", opts.TargetFileBytes)
	}
	if opts.FileRows == 0 {
		opts.FileRows = pqsink.DefaultFileRows
	}
	if outDir == "" {
		return errors.New("analyze: merge: no output directory")
	}
	return nil
}

// mergeTarget is what Merge finds at its output directory.
type mergeTarget struct {
	entries  []os.DirEntry // nil when the directory does not exist
	whole    bool          // a new dataset, committed by one rename
	dataDir  string        // outDir/data
	existing []string      // the part files already in dataDir, sorted
}

// inspectOutDir reads outDir and its part files, refusing a directory
// that is not empty unless force.
func inspectOutDir(outDir string, force bool) (mergeTarget, error) {
	var t mergeTarget
	var err error
	t.entries, err = os.ReadDir(outDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("analyze: %s: %w", outDir, unwrapPath(err))
	}
	t.whole = len(t.entries) == 0
	if !t.whole && !force {
		return t, fmt.Errorf("analyze: %s exists and is not empty (%s...); merge into a new or empty directory, or force adding to it",
			outDir, t.entries[0].Name())
	}
	t.dataDir = filepath.Join(outDir, schema.DataDir)
	t.existing, err = filepath.Glob(filepath.Join(globEscape(t.dataDir), schema.PartGlob))
	if err != nil {
		return t, fmt.Errorf("analyze: %s: %w", t.dataDir, err)
	}
	slices.Sort(t.existing)
	return t, nil
}

// planCuts is where copyRows cuts the rows of files: after
// opts.FileRows rows, or at even shares of rows, over as many files as
// opts.TargetFileBytes or opts.EvenFiles asks.
func planCuts(files []string, rows int64, opts *MergeOptions) cutPlan {
	plan := cutPlan{fileRows: opts.FileRows}
	switch {
	case opts.TargetFileBytes > 0:
		var size int64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				size += st.Size()
			}
		}
		plan.rows = rows
		plan.files = max(1, int64(math.Round(float64(size)/float64(opts.TargetFileBytes))))
	case opts.EvenFiles:
		plan.rows = rows
		plan.files = max(1, (rows+int64(opts.FileRows)-1)/int64(opts.FileRows))
	}
	return plan
}

// commitWhole has write fill a temporary directory beside outDir, then
// renames it to outDir (replacing the empty directory there when
// replace), so that a reader sees all of the dataset or none of it.
func commitWhole(outDir string, replace bool, write func(dir string) error) error {
	parent := filepath.Dir(filepath.Clean(outDir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	prefix := "." + filepath.Base(filepath.Clean(outDir)) + ".merging-"
	removeStaleStaging(parent, prefix)
	tmp, err := os.MkdirTemp(parent, prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // best effort: nothing is left there once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	if err := write(tmp); err != nil {
		return err
	}
	if replace { // an empty directory is replaced
		if err := os.Remove(outDir); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
	}
	if err := os.Rename(tmp, outDir); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	if err := durable.SyncDir(parent); err != nil {
		return fmt.Errorf("analyze: merge: sync %s after renaming %s into it: %w", parent, filepath.Base(outDir), err)
	}
	return nil
}

// cutPlan says where copyRows cuts files: after fileRows rows, or, when
// files > 0, at the group boundaries nearest k*rows/files for k = 1 ..
// files-1.
type cutPlan struct {
	fileRows    int
	rows, files int64
}

// need is the number of rows the file being written must hold before it
// is cut, given the rows written before it and the files committed.
func (p cutPlan) need(before int64, committed int) int {
	if p.files == 0 {
		return p.fileRows
	}
	k := int64(committed) + 1
	if k >= p.files {
		return math.MaxInt
	}
	return int(max(1, (k*p.rows+p.files/2)/p.files-before))
}

// checkNotInside refuses inputs that lie in the output data directory.
func checkNotInside(files []string, dataDir string) error {
	dst, err := os.Stat(dataDir)
	if err != nil {
		return nil // not there yet: nothing can lie in it
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Dir(f))
		if err == nil && os.SameFile(st, dst) {
			return fmt.Errorf("analyze: input %s lies in the output directory %s", f, dataDir)
		}
	}
	return nil
}

type rowKey struct {
	run                 int32
	task                int64
	attempt, rolloutIdx int32
}

// checkInputs opens every file (the part files already in the output,
// then the inputs), checks schemas and schema versions and looks for
// duplicate keys. It returns the inputs' metadata.
func checkInputs(ctx context.Context, existing, files []string, opts *MergeOptions, res *MergeResult) (metas []map[string]string, rows int64, err error) {
	all := append(slices.Clone(existing), files...)
	if err := checkVersions(all, opts); err != nil {
		return nil, 0, err
	}
	var (
		runs       = map[string]int32{}
		seen       = map[rowKey]int32{} // key -> index in all of the first file holding it
		firstDup   error
		keyColumns = []string{"run_id", "task_index", "attempt", "rollout_index"}
	)
	for fi, path := range all {
		f, err := openFile(path, opts.Allocator, opts.BatchRows)
		if err != nil {
			return nil, 0, err
		}
		input := fi >= len(existing)
		if input {
			metas = append(metas, f.meta)
		}
		leaves, err := f.fields(keyColumns)
		if err == nil {
			err = f.records(ctx, leaves, func(rec arrow.Record) error {
				runID := rec.Column(0).(*array.String)
				task := rec.Column(1).(*array.Int64)
				attempt := rec.Column(2).(*array.Int32)
				ri := rec.Column(3).(*array.Int32)
				if input {
					rows += rec.NumRows()
				}
				for i := 0; i < int(rec.NumRows()); i++ {
					run, ok := runs[runID.Value(i)]
					if !ok {
						run = int32(len(runs))
						runs[strings.Clone(runID.Value(i))] = run
					}
					k := rowKey{run: run, task: task.Value(i), attempt: attempt.Value(i), rolloutIdx: ri.Value(i)}
					if first, dup := seen[k]; dup {
						res.Duplicates++
						if firstDup == nil {
							firstDup = fmt.Errorf("run_id %q, task_index %d, attempt %d, rollout_index %d in %s and %s",
								runID.Value(i), k.task, k.attempt, k.rolloutIdx, all[first], path)
						}
						continue
					}
					seen[k] = int32(fi)
				}
				return nil
			})
		}
		f.close()
		if err != nil {
			return nil, 0, err
		}
	}
	if firstDup != nil && !opts.AllowDuplicates {
		return nil, 0, fmt.Errorf("analyze: %d duplicate rows (key run_id, task_index, attempt, rollout_index), first: %w; allow duplicates to merge anyway",
			res.Duplicates, firstDup)
	}
	return metas, rows, nil
}

// checkVersions opens the footer of every file and refuses any whose
// schema version is not the one merge writes, naming it and its version,
// and, when other files are of the current version, one of those.
func checkVersions(files []string, opts *MergeOptions) error {
	var current, old, oldVersion string
	for _, path := range files {
		f, err := openFile(path, opts.Allocator, opts.BatchRows)
		if err != nil {
			return err
		}
		f.close()
		switch {
		case f.version == schema.Version:
			if current == "" {
				current = path
			}
		case old == "":
			old, oldVersion = path, f.version
		}
	}
	switch {
	case old == "":
		return nil
	case current != "":
		return fmt.Errorf("analyze: merge: %s has schema version %s but %s has %s: refusing to merge different schema versions into one output",
			old, oldVersion, current, schema.Version)
	}
	return fmt.Errorf("analyze: merge: %s has schema version %s; merge writes only version %s (version 1 rows keep token ids per message, which cannot be rewritten as spans): merge them with the trajflow version that wrote them",
		old, oldVersion, schema.Version)
}

// mergeMetadata keeps every key whose value all files agree on; a key with
// several distinct values becomes a JSON list of them, sorted. Arrow's own
// keys (ARROW:*) are dropped: they describe the writer, not the data.
func mergeMetadata(metas []map[string]string) map[string]string {
	values := map[string][]string{}
	for _, m := range metas {
		for k, v := range m {
			if strings.HasPrefix(k, "ARROW:") {
				continue
			}
			if !slices.Contains(values[k], v) {
				values[k] = append(values[k], v)
			}
		}
	}
	out := make(map[string]string, len(values))
	for k, vs := range values {
		if len(vs) == 1 {
			out[k] = vs[0]
			continue
		}
		slices.Sort(vs)
		b, _ := json.Marshal(vs)
		out[k] = string(b)
	}
	return out
}

// copyRows writes every row of files into outDir/data, cutting files
// between groups once they hold opts.FileRows rows, and, when steps is
// not nil (the files' steps files, in the same order), each file's step
// rows into outDir/steps.
func copyRows(ctx context.Context, files, steps []string, outDir string, opts *MergeOptions, plan cutPlan, res *MergeResult) (err error) {
	c := &rowCopier{
		ctx:     ctx,
		opts:    opts,
		plan:    plan,
		res:     res,
		dataDir: filepath.Join(outDir, schema.DataDir),
		need:    plan.need(0, 0),
	}
	if steps != nil {
		if c.sc, err = newStepCopier(filepath.Join(outDir, schema.StepsDir), opts.Compression, res.Metadata); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
		defer func() { err = errors.Join(err, c.sc.close()) }()
	}
	if err := c.setWriterOptions(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = c.abort(err)
		}
	}()
	for fi, path := range files {
		var stepsPath string
		if steps != nil {
			stepsPath = steps[fi]
		}
		if err := c.copyFile(path, stepsPath); err != nil {
			return err
		}
	}
	return c.commit()
}

// rowCopier is the state of copyRows: the open output file, its rows,
// and the group of the last row written.
type rowCopier struct {
	ctx     context.Context
	opts    *MergeOptions
	plan    cutPlan
	res     *MergeResult
	dataDir string
	wopts   pqsink.Options
	sc      *stepCopier // nil without steps files

	w    *pqsink.Writer // the open file, or nil
	cur  int            // rows in the open file
	need int            // the rows the open file must hold before a cut
	// prev is the group of the last row written, for cuts between
	// groups; nil before the first.
	prev *pqsink.StepGroup
}

// setWriterOptions sets the options of the output files' writers: cuts
// made by the copier alone, each commit recorded in res.Files, and a
// file's step rows committed under its name before it.
func (c *rowCopier) setWriterOptions() error {
	c.wopts = pqsink.Options{
		FileRows:     math.MaxInt, // cuts are made here, between groups
		FileBytes:    math.MaxInt64,
		RowGroupRows: c.opts.RowGroupRows,
		Compression:  c.opts.Compression,
		Metadata:     c.res.Metadata,
		OnCommit:     c.committed,
	}
	if c.sc != nil {
		// A file's step rows are committed under its name before it.
		c.wopts.BeforeRename = func(final string) error { return c.sc.commit(len(c.res.Files), filepath.Base(final)) }
	}
	if err := c.wopts.Validate(); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	return nil
}

// committed records a committed output file.
func (c *rowCopier) committed(path string, rows int) {
	c.res.Files = append(c.res.Files, path)
	if c.opts.OnCommit != nil {
		c.opts.OnCommit(path, rows)
	}
}

// abort, after err, drops the open file and removes the files committed
// (and their steps files).
func (c *rowCopier) abort(err error) error {
	if c.w != nil {
		err = errors.Join(err, c.w.Abort())
	}
	for _, p := range c.res.Files {
		_ = os.Remove(p)
		if c.sc != nil {
			_ = os.Remove(filepath.Join(c.sc.w.Dir(), filepath.Base(p)))
		}
	}
	c.res.Files = nil
	return err
}

// copyFile copies every row of the Parquet file path, and, with steps
// files, the step rows of stepsPath.
func (c *rowCopier) copyFile(path, stepsPath string) error {
	if c.sc != nil {
		if err := c.sc.open(stepsPath, path); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
	}
	f, err := openFile(path, c.opts.Allocator, c.opts.BatchRows)
	if err != nil {
		return err
	}
	err = f.records(c.ctx, nil, c.copyRecord)
	f.close()
	if err != nil {
		return err
	}
	if c.sc != nil {
		// The rest of the file's step rows go with the open file.
		if err := c.sc.finish(len(c.res.Files)); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
	}
	return nil
}

// copyRecord writes the rows of rec, cutting the open file at the first
// group boundary once it holds need rows.
func (c *rowCopier) copyRecord(rec arrow.Record) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	g := groupColumns(rec)
	start := 0
	for i := start + min(n, max(0, c.need-c.cur)); i < n; {
		if c.cur+i-start > 0 && g.startsGroup(i, c.prev) {
			if err := c.write(rec, start, i); err != nil {
				return err
			}
			if err := c.commit(); err != nil {
				return err
			}
			start = i
			i = start + min(n, c.need)
			continue
		}
		i++
	}
	if err := c.write(rec, start, n); err != nil {
		return err
	}
	last := g.group(n - 1)
	last.RunID = strings.Clone(last.RunID)
	c.prev = &last
	return nil
}

// write writes rows [from, to) of rec into the open file, opening one
// when none is.
func (c *rowCopier) write(rec arrow.Record, from, to int) error {
	if to <= from {
		return nil
	}
	if c.w == nil {
		var err error
		if c.w, err = pqsink.New(c.dataDir, c.wopts); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
	}
	s := rec
	if from > 0 || to < int(rec.NumRows()) {
		s = rec.NewSlice(int64(from), int64(to))
		defer s.Release()
	}
	if err := c.w.Write(c.ctx, s); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	if c.sc != nil {
		c.sc.wrote(s, len(c.res.Files))
	}
	c.cur += to - from
	c.res.Rows += int64(to - from)
	return nil
}

// commit commits the open file, if any, and sets the rows the next one
// must hold.
func (c *rowCopier) commit() error {
	if c.w == nil {
		return nil
	}
	err := c.w.Close(c.ctx)
	c.w, c.cur = nil, 0
	c.need = c.plan.need(c.res.Rows, len(c.res.Files))
	if err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	return nil
}

// groupCols are the columns of a record that say which group each row
// is in.
type groupCols struct {
	runID   *array.String
	task    []int64
	attempt []int32
}

// groupColumns are rec's group columns.
func groupColumns(rec arrow.Record) groupCols {
	return groupCols{
		runID:   rec.Column(schema.ColRunID).(*array.String),
		task:    rec.Column(schema.ColTaskIndex).(*array.Int64).Int64Values(),
		attempt: rec.Column(schema.ColAttempt).(*array.Int32).Int32Values(),
	}
}

// group is the group of row i; its RunID points into the record.
func (g groupCols) group(i int) pqsink.StepGroup {
	return pqsink.StepGroup{RunID: g.runID.Value(i), TaskIndex: g.task[i], Attempt: g.attempt[i]}
}

// startsGroup says whether row i starts a group, prev being the group of
// the last row written before the record (nil: none).
func (g groupCols) startsGroup(i int, prev *pqsink.StepGroup) bool {
	if i == 0 {
		return prev == nil || *prev != g.group(0)
	}
	return g.group(i) != g.group(i-1)
}
