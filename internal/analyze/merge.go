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
	if opts.FileRows < 0 {
		return nil, fmt.Errorf("analyze: merge file_rows %d: must be >= 0", opts.FileRows)
	}
	if opts.TargetFileBytes < 0 {
		return nil, fmt.Errorf("analyze: merge target file size %d: must be >= 0", opts.TargetFileBytes)
	}
	if opts.FileRows == 0 {
		opts.FileRows = pqsink.DefaultFileRows
	}
	if outDir == "" {
		return nil, errors.New("analyze: merge: no output directory")
	}
	files, err := ResolveFiles(inputs)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(outDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("analyze: %s: %w", outDir, unwrapPath(err))
	}
	whole := len(entries) == 0 // a new dataset, committed by one rename
	if !whole && !opts.Force {
		return nil, fmt.Errorf("analyze: %s exists and is not empty (%s...); merge into a new or empty directory, or force adding to it",
			outDir, entries[0].Name())
	}
	dataDir := filepath.Join(outDir, schema.DataDir)
	existing, err := filepath.Glob(filepath.Join(globEscape(dataDir), schema.PartGlob))
	if err != nil {
		return nil, fmt.Errorf("analyze: %s: %w", dataDir, err)
	}
	slices.Sort(existing)
	if err := checkNotInside(files, dataDir); err != nil {
		return nil, err
	}

	res := &MergeResult{Inputs: files}
	steps, err := stepsOf(files)
	if err != nil {
		return nil, err
	}
	res.Steps = steps != nil
	if err := checkStepsPaired(outDir, len(existing) > 0, res.Steps); err != nil {
		return nil, err
	}
	metas, rows, err := checkInputs(ctx, existing, files, &opts, res)
	if err != nil {
		return nil, err
	}
	res.Metadata = mergeMetadata(metas)
	plan := cutPlan{fileRows: opts.FileRows}
	if opts.TargetFileBytes > 0 || opts.EvenFiles {
		plan.rows = rows
		if opts.TargetFileBytes > 0 {
			var size int64
			for _, f := range files {
				if st, err := os.Stat(f); err == nil {
					size += st.Size()
				}
			}
			plan.files = max(1, int64(math.Round(float64(size)/float64(opts.TargetFileBytes))))
		} else {
			plan.files = max(1, (rows+int64(opts.FileRows)-1)/int64(opts.FileRows))
		}
	}
	if !whole {
		if err := copyImages(files, filepath.Join(outDir, schema.ImagesDir), res); err != nil {
			return nil, err
		}
		if err := copyRows(ctx, files, steps, outDir, &opts, plan, res); err != nil {
			return nil, err
		}
		return res, nil
	}
	parent := filepath.Dir(filepath.Clean(outDir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("analyze: merge: %w", err)
	}
	prefix := "." + filepath.Base(filepath.Clean(outDir)) + ".merging-"
	removeStaleStaging(parent, prefix)
	tmp, err := os.MkdirTemp(parent, prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("analyze: merge: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // best effort: nothing is left there once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("analyze: merge: %w", err)
	}
	if err := copyImages(files, filepath.Join(tmp, schema.ImagesDir), res); err != nil {
		return nil, err
	}
	if err := copyRows(ctx, files, steps, tmp, &opts, plan, res); err != nil {
		return nil, err
	}
	if entries != nil { // an empty directory is replaced
		if err := os.Remove(outDir); err != nil {
			return nil, fmt.Errorf("analyze: merge: %w", err)
		}
	}
	if err := os.Rename(tmp, outDir); err != nil {
		return nil, fmt.Errorf("analyze: merge: %w", err)
	}
	if err := durable.SyncDir(parent); err != nil {
		return nil, fmt.Errorf("analyze: merge: sync %s after renaming %s into it: %w", parent, filepath.Base(outDir), err)
	}
	for i, f := range res.Files {
		res.Files[i] = filepath.Join(dataDir, filepath.Base(f))
	}
	return res, nil
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

// groupKey is the group of the last row written, for cuts between groups.
type groupKey struct {
	valid   bool
	run     string
	task    int64
	attempt int32
}

// copyRows writes every row of files into outDir/data, cutting files
// between groups once they hold opts.FileRows rows, and, when steps is
// not nil (the files' steps files, in the same order), each file's step
// rows into outDir/steps.
func copyRows(ctx context.Context, files, steps []string, outDir string, opts *MergeOptions, plan cutPlan, res *MergeResult) (err error) {
	var (
		w    *pqsink.Writer
		cur  int // rows in the open file
		prev groupKey
		// need is the rows the open file must hold before a cut.
		need    = plan.need(0, 0)
		dataDir = filepath.Join(outDir, schema.DataDir)
		sc      *stepCopier
	)
	if steps != nil {
		if sc, err = newStepCopier(filepath.Join(outDir, schema.StepsDir), opts.Compression, res.Metadata); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
		defer func() { err = errors.Join(err, sc.close()) }()
	}
	wopts := pqsink.Options{
		FileRows:     math.MaxInt, // cuts are made here, between groups
		FileBytes:    math.MaxInt64,
		RowGroupRows: opts.RowGroupRows,
		Compression:  opts.Compression,
		Metadata:     res.Metadata,
		OnCommit: func(path string, rows int) {
			res.Files = append(res.Files, path)
			if opts.OnCommit != nil {
				opts.OnCommit(path, rows)
			}
		},
	}
	if sc != nil {
		// A file's step rows are committed under its name before it.
		wopts.BeforeRename = func(final string) error { return sc.commit(len(res.Files), filepath.Base(final)) }
	}
	if err := wopts.Validate(); err != nil {
		return fmt.Errorf("analyze: merge: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if w != nil {
			err = errors.Join(err, w.Abort())
		}
		for _, p := range res.Files {
			_ = os.Remove(p)
			if sc != nil {
				_ = os.Remove(filepath.Join(sc.w.Dir(), filepath.Base(p)))
			}
		}
		res.Files = nil
	}()
	write := func(rec arrow.Record, from, to int) error {
		if to <= from {
			return nil
		}
		if w == nil {
			var err error
			if w, err = pqsink.New(dataDir, wopts); err != nil {
				return fmt.Errorf("analyze: merge: %w", err)
			}
		}
		s := rec
		if from > 0 || to < int(rec.NumRows()) {
			s = rec.NewSlice(int64(from), int64(to))
			defer s.Release()
		}
		if err := w.Write(ctx, s); err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
		if sc != nil {
			sc.wrote(s, len(res.Files))
		}
		cur += to - from
		res.Rows += int64(to - from)
		return nil
	}
	commit := func() error {
		if w == nil {
			return nil
		}
		err := w.Close(ctx)
		w, cur = nil, 0
		need = plan.need(res.Rows, len(res.Files))
		if err != nil {
			return fmt.Errorf("analyze: merge: %w", err)
		}
		return nil
	}

	for fi, path := range files {
		if sc != nil {
			if err := sc.open(steps[fi], path); err != nil {
				return fmt.Errorf("analyze: merge: %w", err)
			}
		}
		f, err := openFile(path, opts.Allocator, opts.BatchRows)
		if err != nil {
			return err
		}
		err = f.records(ctx, nil, func(rec arrow.Record) error {
			n := int(rec.NumRows())
			if n == 0 {
				return nil
			}
			runID := rec.Column(schema.ColRunID).(*array.String)
			task := rec.Column(schema.ColTaskIndex).(*array.Int64).Int64Values()
			attempt := rec.Column(schema.ColAttempt).(*array.Int32).Int32Values()
			groupStart := func(i int) bool {
				if i == 0 {
					return !prev.valid || prev.run != runID.Value(0) || prev.task != task[0] || prev.attempt != attempt[0]
				}
				return task[i] != task[i-1] || attempt[i] != attempt[i-1] || runID.Value(i) != runID.Value(i-1)
			}
			start := 0
			for i := start + min(n, max(0, need-cur)); i < n; {
				if cur+i-start > 0 && groupStart(i) {
					if err := write(rec, start, i); err != nil {
						return err
					}
					if err := commit(); err != nil {
						return err
					}
					start = i
					i = start + min(n, need)
					continue
				}
				i++
			}
			if err := write(rec, start, n); err != nil {
				return err
			}
			prev = groupKey{valid: true, run: strings.Clone(runID.Value(n - 1)), task: task[n-1], attempt: attempt[n-1]}
			return nil
		})
		f.close()
		if err != nil {
			return err
		}
		if sc != nil {
			// The rest of the file's step rows go with the open file.
			if err := sc.finish(len(res.Files)); err != nil {
				return fmt.Errorf("analyze: merge: %w", err)
			}
		}
	}
	return commit()
}
