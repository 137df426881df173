package pqread

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// DefaultBatchRows is the most rows of one record when Open is given 0.
const DefaultBatchRows = 4096

// BatchBytes bounds the uncompressed size of one record: Records reads
// fewer than the batch rows of Open when the footer says rows are large
// (an agent trajectory can be several MiB), so a batch stays near this.
const BatchBytes = 64 << 20

// ReadError is a fault of Arrow's reader on a file: a panic it raised or
// an inconsistency it left unreported.
type ReadError struct {
	Path   string
	Column string // top-level column, "" when not known
	Reason string
}

func (e *ReadError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s: unreadable: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("%s: column %s unreadable: %s", e.Path, e.Column, e.Reason)
}

// Guard calls fn and turns a panic it raises into a *ReadError naming path
// and column. Only the calling goroutine is covered.
func Guard(path, column string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &ReadError{Path: path, Column: column, Reason: fmt.Sprintf("reader panic: %v", p)}
		}
	}()
	return fn()
}

// File is a Parquet file open for Arrow's reader.
type File struct {
	Path  string
	PF    *file.Reader
	Arrow *pqarrow.FileReader

	alloc     memory.Allocator
	batchRows int
}

// Open opens path for reading records of at most batchRows rows (0:
// DefaultBatchRows) allocated from alloc (nil: the default allocator).
// Errors name path.
func Open(path string, alloc memory.Allocator, batchRows int) (*File, error) {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	if batchRows <= 0 {
		batchRows = DefaultBatchRows
	}
	osf, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Path: path, alloc: alloc, batchRows: batchRows}
	err = Guard(path, "", func() error {
		var err error
		f.PF, err = file.NewParquetReader(osf, file.WithReadProps(parquet.NewReaderProperties(alloc)))
		if err != nil {
			return fmt.Errorf("%s: not a readable Parquet file: %w", path, err)
		}
		f.Arrow, err = pqarrow.NewFileReader(f.PF, pqarrow.ArrowReadProperties{BatchSize: int64(batchRows)}, alloc)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		if f.PF != nil {
			_ = f.PF.Close() // closes osf
		} else {
			_ = osf.Close()
		}
		return nil, err
	}
	return f, nil
}

// Close closes the file.
func (f *File) Close() error { return f.PF.Close() }

// Metadata returns the file's key-value metadata.
func (f *File) Metadata() map[string]string {
	out := map[string]string{}
	for _, kv := range f.PF.MetaData().KeyValueMetadata() {
		if kv.Value != nil {
			out[kv.Key] = *kv.Value
		}
	}
	return out
}

// Schema returns the file's Arrow schema.
func (f *File) Schema() (*arrow.Schema, error) {
	var s *arrow.Schema
	err := Guard(f.Path, "", func() error {
		var err error
		s, err = f.Arrow.Schema()
		return err
	})
	return s, err
}

// Fields returns the indices of the named top-level columns, in the order
// given. A missing name is an error naming path.
func (f *File) Fields(names ...string) ([]int, error) {
	out := make([]int, 0, len(names))
	for _, name := range names {
		found := -1
		for i := range f.Arrow.Manifest.Fields {
			if f.Arrow.Manifest.Fields[i].Field.Name == name {
				found = i
				break
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("%s: no column %q", f.Path, name)
		}
		out = append(out, found)
	}
	return out, nil
}

// Records calls fn with each record of the given top-level columns (by
// index into the file's schema, in that order; nil: every column), in row
// order. A record is released when fn returns; an error of fn is returned
// as is. Arrow's reader runs on the calling goroutine, one column at a
// time, so a panic of it is a *ReadError naming the column.
func (f *File) Records(ctx context.Context, fields []int, fn func(arrow.Record) error) error {
	man := f.Arrow.Manifest
	if fields == nil {
		fields = make([]int, len(man.Fields))
		for i := range fields {
			fields[i] = i
		}
	}
	for _, fi := range fields {
		if fi < 0 || fi >= len(man.Fields) {
			return fmt.Errorf("%s: no column %d (the file has %d)", f.Path, fi, len(man.Fields))
		}
	}
	if len(fields) == 0 || f.PF.NumRowGroups() == 0 {
		return nil
	}
	rowGroups := make([]int, f.PF.NumRowGroups())
	for i := range rowGroups {
		rowGroups[i] = i
	}
	leaves := map[int]bool{}
	for _, fi := range fields {
		var walk func(sf *pqarrow.SchemaField)
		walk = func(sf *pqarrow.SchemaField) {
			if sf.IsLeaf() {
				leaves[sf.ColIndex] = true
			}
			for i := range sf.Children {
				walk(&sf.Children[i])
			}
		}
		walk(&man.Fields[fi])
	}

	readers := make([]*pqarrow.ColumnReader, len(fields))
	defer func() {
		for _, r := range readers {
			if r != nil {
				r.Release()
			}
		}
	}()
	schemaFields := make([]arrow.Field, len(fields))
	for i, fi := range fields {
		name := man.Fields[fi].Field.Name
		err := Guard(f.Path, name, func() error {
			r, err := f.Arrow.GetFieldReader(ctx, fi, leaves, rowGroups)
			if err != nil {
				return fmt.Errorf("%s: column %s: %w", f.Path, name, err)
			}
			readers[i] = r
			schemaFields[i] = *r.Field()
			return nil
		})
		if err != nil {
			return err
		}
	}
	schema := arrow.NewSchema(schemaFields, nil)

	batch := f.batchFor(leaves)
	want := f.PF.NumRows()
	var done int64
	cols := make([]arrow.Array, len(fields))
	release := func() {
		for i, c := range cols {
			if c != nil {
				c.Release()
				cols[i] = nil
			}
		}
	}
	defer release()
	for done < want {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := -1
		for i, r := range readers {
			name := schemaFields[i].Name
			err := Guard(f.Path, name, func() error {
				ch, err := r.NextBatch(min(batch, want-done))
				if err != nil {
					return fmt.Errorf("%s: column %s: %w", f.Path, name, err)
				}
				defer ch.Release()
				switch len(ch.Chunks()) {
				case 0:
					cols[i] = array.MakeArrayOfNull(f.alloc, ch.DataType(), 0)
				case 1:
					cols[i] = ch.Chunk(0)
					cols[i].Retain()
				default:
					cols[i], err = array.Concatenate(ch.Chunks(), f.alloc)
					if err != nil {
						return fmt.Errorf("%s: column %s: %w", f.Path, name, err)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if l := cols[i].Len(); n < 0 {
				n = l
			} else if l != n {
				return &ReadError{Path: f.Path, Column: name, Reason: fmt.Sprintf(
					"%d rows read after row %d, but %d of column %s", l, done, n, schemaFields[0].Name)}
			}
		}
		if n == 0 {
			return &ReadError{Path: f.Path, Column: schemaFields[0].Name, Reason: fmt.Sprintf(
				"ended after %d of the %d rows the footer declares (a page the reader could not decode?)", done, want)}
		}
		rec := array.NewRecord(schema, cols, int64(n))
		release()
		err := fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
		done += int64(n)
	}
	return nil
}

// batchFor returns the rows to read at a time: the batch rows of Open, or
// fewer when the footer says the given leaves hold more than BatchBytes in
// that many rows.
func (f *File) batchFor(leaves map[int]bool) int64 {
	var bytes, rows int64
	md := f.PF.MetaData()
	for g := range f.PF.NumRowGroups() {
		rg := md.RowGroup(g)
		rows += rg.NumRows()
		for c := range leaves {
			if cc, err := rg.ColumnChunk(c); err == nil {
				bytes += max(cc.TotalUncompressedSize(), 0)
			}
		}
	}
	batch := int64(f.batchRows)
	if rows > 0 && bytes > 0 {
		per := max(bytes/rows, 1)
		batch = min(batch, max(BatchBytes/per, 1))
	}
	return batch
}
