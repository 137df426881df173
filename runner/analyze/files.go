package analyze

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/schema"
	shardset "github.com/trajflow/trajflow/schema/shards"
)

// DefaultBatchRows is the number of rows per record batch read when an
// option leaves it 0.
const DefaultBatchRows = 4096

// ResolveFiles expands paths into Parquet files: a file stands for itself;
// a directory for every data/part-*.parquet under it, or, for a sharded
// run's root, under each of its shards (ROOT/shards/SSSSS-of-NNNNN/data,
// see Shards), or, for trajflow serve's served directory (OUTPUT/served),
// every served step's step-NNNNNN/part-*.parquet, or, when there is none
// of these, every *.parquet directly in it (hidden names skipped: a step
// folder is read so). Files are
// sorted by name within each directory and listed once. A missing path, or
// a directory without Parquet files, is an error naming it.
func ResolveFiles(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, errors.New("analyze: no input paths")
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		key := p
		if abs, err := filepath.Abs(p); err == nil {
			key = abs
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("analyze: %s: %w", p, unwrapPath(err))
		}
		if !st.IsDir() {
			add(p)
			continue
		}
		files, err := dirFiles(p)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("analyze: %s: no Parquet files (looked for data/part-*.parquet, shards/*/data/part-*.parquet, step-*/part-*.parquet and *.parquet)", p)
		}
		for _, f := range files {
			add(f)
		}
	}
	return out, nil
}

// unwrapPath drops the *PathError wrapper so the path is not named twice.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// dirFiles lists the Parquet files a directory stands for.
func dirFiles(dir string) ([]string, error) {
	parts, err := filepath.Glob(filepath.Join(globEscape(dir), schema.DataDir, schema.PartGlob))
	if err != nil {
		return nil, fmt.Errorf("analyze: %s: %w", dir, err)
	}
	if len(parts) == 0 {
		set, ok, err := shardset.Scan(dir)
		if err != nil {
			return nil, fmt.Errorf("analyze: %s: %w", dir, err)
		}
		if ok {
			for _, sh := range set.Shards {
				p, err := filepath.Glob(filepath.Join(globEscape(sh.Dir), schema.DataDir, schema.PartGlob))
				if err != nil {
					return nil, fmt.Errorf("analyze: %s: %w", sh.Dir, err)
				}
				parts = append(parts, p...)
			}
		}
	}
	if len(parts) == 0 {
		// A served directory: its steps, in step order (the names sort so).
		parts, err = filepath.Glob(filepath.Join(globEscape(dir), schema.ServedStepPrefix+"*", schema.PartGlob))
		if err != nil {
			return nil, fmt.Errorf("analyze: %s: %w", dir, err)
		}
	}
	if len(parts) == 0 {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("analyze: %s: %w", dir, unwrapPath(err))
		}
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() && strings.HasSuffix(name, ".parquet") && !strings.HasPrefix(name, ".") {
				parts = append(parts, filepath.Join(dir, name))
			}
		}
	}
	slices.Sort(parts)
	return parts, nil
}

// globEscape escapes the glob metacharacters of a literal path.
func globEscape(p string) string {
	var sb strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// pqFile is an open Parquet file in the output schema.
type pqFile struct {
	f *pqread.File
	// meta is the file's key-value metadata.
	meta map[string]string
	// version is the file's schema version (schema.FileVersion): one of
	// schema.Versions.
	version string
}

// openFile opens path with Arrow's reader and checks that it is in one of
// the schema versions trajflow reads.
func openFile(path string, alloc memory.Allocator, batchRows int) (*pqFile, error) {
	if batchRows <= 0 {
		batchRows = DefaultBatchRows
	}
	pf, err := pqread.Open(path, alloc, batchRows)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	f := &pqFile{f: pf, meta: pf.Metadata()}
	s, err := pf.Schema()
	if err != nil {
		f.close()
		return nil, fmt.Errorf("analyze: %w", err)
	}
	if f.version, err = schema.FileVersion(f.meta, s); err != nil {
		f.close()
		return nil, fmt.Errorf("analyze: %s: not in trajflow's output schema: %w", path, err)
	}
	return f, nil
}

func (f *pqFile) close() { _ = f.f.Close() }

// fields returns the indices of the named top-level columns, in file
// order.
func (f *pqFile) fields(names []string) ([]int, error) {
	out, err := f.f.Fields(names...)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// records calls fn with each record batch of the given top-level columns
// (nil: every column). The record is released when fn returns. A fault of
// Arrow's reader is an error naming the file and column.
func (f *pqFile) records(ctx context.Context, fields []int, fn func(arrow.Record) error) error {
	var fnErr error
	err := f.f.Records(ctx, fields, func(rec arrow.Record) error {
		fnErr = fn(rec)
		return fnErr
	})
	if err == nil || err == fnErr || err == ctx.Err() {
		return err
	}
	return fmt.Errorf("analyze: %w", err)
}

// Shards reports, for each of paths that is a sharded run's root (it holds
// manifest.json or a shards directory), which shards it holds against its
// manifest: missing and incomplete shards, those of another count.
func Shards(paths []string) ([]*shardset.Set, error) {
	var out []*shardset.Set
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue
		}
		set, ok, err := shardset.Scan(p)
		if err != nil {
			return nil, fmt.Errorf("analyze: %s: %w", p, err)
		}
		if ok {
			out = append(out, set)
		}
	}
	return out, nil
}
