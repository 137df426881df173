package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/pipeline"
)

// parquetBatch is how many rows are read from the file at a time.
const parquetBatch = 32

// parquetReader reads a Parquet file a small batch of rows at a time; only
// the footer and the pages of the current rows are in memory.
type parquetReader struct {
	base
	f      *os.File
	pf     *parquet.File
	rows   parquet.Rows // the file's row groups, one after the other
	schema *parquet.Schema
	tree   *pnode
	cols   [][]parquet.Value // per leaf column, the current row's values

	buf  []parquet.Row
	n, i int   // rows in buf, next one to use
	next int64 // task index of buf[i]
	err  error
}

var _ Reader = (*parquetReader)(nil)

func openParquet(f *os.File, size int64, b base) (r *parquetReader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("source: %s: not a readable Parquet file: %v", b.path, p)
		}
	}()
	pf, err := parquet.OpenFile(f, size, parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
	if err != nil {
		return nil, fmt.Errorf("source: %s: not a readable Parquet file: %w", b.path, err)
	}
	if pf.NumRows() == 0 {
		return nil, fmt.Errorf("source: %s: no rows", b.path)
	}
	r = &parquetReader{base: b, f: f, pf: pf, schema: pf.Schema(), buf: make([]parquet.Row, parquetBatch)}
	var ncols int
	r.tree, ncols = buildSchemaTree(r.schema)
	r.cols = make([][]parquet.Value, ncols)
	// The row groups' own readers, in file order: they read a page of
	// each column at a time, never the whole file.
	r.rows = parquet.MultiRowGroup(pf.RowGroups()...).Rows()
	// Under task_index: dedup the rows before the offset are read too:
	// they number the tasks.
	if b.win.offset > 0 && b.seen == nil {
		if b.win.offset >= pf.NumRows() {
			r.err = io.EOF
			return r, nil
		}
		if err := r.rows.SeekToRow(b.win.offset); err != nil {
			return nil, fmt.Errorf("source: %s: seeking to row %d: %w", b.path, b.win.offset, err)
		}
		r.next = b.win.offset
	}
	return r, nil
}

func (r *parquetReader) where(i int64) string { return fmt.Sprintf("%s:row %d", r.path, i) }

func (r *parquetReader) Next(ctx context.Context) (*pipeline.Task, error) {
	for {
		if r.err != nil {
			return nil, r.err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.win.past(r.next) {
			r.err = io.EOF
			return nil, io.EOF
		}
		if r.i == r.n {
			if err := r.fill(); err != nil {
				r.err = err
				return nil, err
			}
			continue
		}
		row := r.buf[r.i]
		line := r.next
		r.i++
		r.next++
		idx := line
		var raw []byte
		var err error
		if r.seen != nil { // dedup: every row is converted to be numbered
			raw, err = r.rowJSON(row)
			dup := false
			if err == nil {
				idx, dup = r.taskIndex(line, raw)
			} else {
				idx = r.taskIndexUnique()
			}
			if dup {
				continue
			}
		}
		if !r.win.keep(line) || r.skip(idx) {
			continue
		}
		if r.seen == nil {
			raw, err = r.rowJSON(row)
		}
		if err == nil {
			var task *pipeline.Task
			task, err = parseRow(r.where(line), idx, raw)
			if err == nil {
				return task, nil
			}
		} else {
			err = &RowError{Where: r.where(line), Reason: err.Error()}
		}
		if err := r.bad(err, raw); err != nil {
			r.err = err
			return nil, err
		}
	}
}

// fill reads the next batch of rows.
func (r *parquetReader) fill() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("source: %s: near row %d: corrupt Parquet data: %v", r.path, r.next, p)
		}
	}()
	n, err := r.rows.ReadRows(r.buf)
	r.n, r.i = n, 0
	if n > 0 {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return io.EOF
	}
	return fmt.Errorf("source: %s: near row %d: %w", r.path, r.next, err)
}

// rowJSON converts a Parquet row into a JSON object, top-level columns in
// schema order.
func (r *parquetReader) rowJSON(row parquet.Row) (raw []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			raw, err = nil, fmt.Errorf("cannot convert the row: %v", p)
		}
	}()
	for i := range r.cols {
		r.cols[i] = nil
	}
	row.Range(func(ci int, vals []parquet.Value) bool {
		if ci < len(r.cols) {
			r.cols[ci] = vals
		}
		return true
	})
	obj, err := assembleRow(r.tree, r.cols)
	if err != nil {
		return nil, fmt.Errorf("cannot convert the row: %w", err)
	}
	return pipeline.MarshalJSON(obj)
}

func (r *parquetReader) Close() error {
	if r.err == nil {
		r.err = errors.New("source: reader closed")
	}
	var errs []error
	if r.rows != nil {
		errs = append(errs, r.rows.Close())
	}
	errs = append(errs, r.f.Close())
	return errors.Join(errs...)
}
