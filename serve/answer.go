package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
)

// stepKeep is the groups of st a caller of rank and world is answered: a
// rank's slice of a step served to a world, a remainder's groups (a
// narrowed step served whole: its file holds the groups trained on
// before too), or nil for the whole step.
func stepKeep(st *stepState, rank, world int) map[groupRef]bool {
	var refs []groupRef
	switch {
	case st.World > 0 && world > 0:
		for _, i := range partition(st.GroupTokens, st.World)[rank] {
			refs = append(refs, st.Groups[i])
		}
	case len(st.Trained) > 0:
		refs = st.Groups
	default:
		return nil
	}
	keep := make(map[groupRef]bool, len(refs))
	for _, ref := range refs {
		keep[ref] = true
	}
	return keep
}

// answerStep writes step n in a format: a Parquet answer is the step's
// part file as it is; an Arrow or JSONL answer is encoded from the
// records of fresh (the groups the step was just made of) when they share
// one schema, else from the part file read back (a step served again).
// keep, when not nil, is a rank's slice or a step's remainder (its
// groups not trained on): the groups answered (fresh holds those alone);
// Parquet of a remainder is a part file written for the answer as the
// step's was (writePart), of those groups alone.
func (h *handler) answerStep(ctx context.Context, w http.ResponseWriter, n int64, format string, fresh []*group, keep map[groupRef]bool) error {
	path := h.s.stepFile(n)
	if format == FormatParquet || recordsOf(fresh) == nil {
		// Read from the file: wait for it to be written.
		if err := h.s.written(ctx, n); err != nil {
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "step %d: %v", n, err)
			return err
		}
	}
	if format == FormatParquet && keep != nil {
		tmp, err := os.MkdirTemp("", "trajflow-step-answer-")
		if err != nil {
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "step %d: %v", n, err)
			return err
		}
		defer func() { _ = os.RemoveAll(tmp) }() // best effort: a temporary folder, answered
		f, err := pqread.Open(path, h.s.alloc, 4096)
		if err == nil {
			err = h.s.writePart(ctx, tmp, n, func(fn func(arrow.Record) error) error { return eachKept(ctx, f, nil, n, keep, fn) })
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "step %d: %v", n, err)
			return err
		}
		path = filepath.Join(tmp, schema.PartName(0))
	}
	if format == FormatParquet {
		f, err := os.Open(path)
		if err != nil {
			failReason(w, http.StatusInternalServerError, client.ReasonInternal, "reading step %d: %v", n, err)
			return err
		}
		defer func() { _ = f.Close() }() // best effort: read only
		if fi, err := f.Stat(); err == nil {
			w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		}
		_, err = io.Copy(w, f)
		return err
	}
	if recs := recordsOf(fresh); recs != nil {
		return encodeStep(w, format, answerSchema(recs[0].Schema(), h.s.stepMetadata(n)), h.s.alloc, func(fn func(arrow.Record) error) error {
			for _, rec := range recs {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(rec); err != nil {
					return err
				}
			}
			return nil
		})
	}
	f, err := pqread.Open(path, h.s.alloc, 4096)
	if err != nil {
		failReason(w, http.StatusInternalServerError, client.ReasonInternal, "reading step %d: %v", n, err)
		return err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	sc, err := f.Schema()
	if err != nil {
		failReason(w, http.StatusInternalServerError, client.ReasonInternal, "reading step %d: %v", n, err)
		return err
	}
	return encodeStep(w, format, answerSchema(sc, f.Metadata()), h.s.alloc, func(fn func(arrow.Record) error) error { return eachKept(ctx, f, nil, n, keep, fn) })
}

// eachKept calls fn with the records of step n's part file f (the
// columns fields, nil: all), of the
// groups in keep alone when keep is not nil.
func eachKept(ctx context.Context, f *pqread.File, fields []int, n int64, keep map[groupRef]bool, fn func(arrow.Record) error) error {
	if keep == nil {
		return f.Records(ctx, fields, fn)
	}
	return f.Records(ctx, fields, func(rec arrow.Record) error {
		parts, err := keepGroups(rec, keep)
		if err != nil {
			return fmt.Errorf("step %d: %w", n, err)
		}
		defer func() {
			for _, p := range parts {
				p.Release()
			}
		}()
		for _, p := range parts {
			if err := fn(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// recordsOf returns the records of groups in order, or nil when there
// are none or they do not share one schema (files of several writers).
func recordsOf(groups []*group) []arrow.Record {
	var recs []arrow.Record
	for _, g := range groups {
		for _, rec := range g.recs {
			if len(recs) > 0 && !rec.Schema().Equal(recs[0].Schema()) {
				return nil
			}
			recs = append(recs, rec)
		}
	}
	return recs
}

// encodeStep writes the records each calls back with as an Arrow IPC
// stream of schema sc, one record batch a group (byGroup), or as JSON
// lines: the same bytes whether the records are the step's groups as
// read from data/ (a new step) or its part file read back (a step served
// again, or replayed).
func encodeStep(w io.Writer, format string, sc *arrow.Schema, alloc memory.Allocator, each func(func(arrow.Record) error) error) error {
	if format == FormatJSONL {
		return each(func(rec arrow.Record) error { return array.RecordToJSON(rec, w) })
	}
	iw := ipc.NewWriter(w, ipc.WithSchema(sc), ipc.WithAllocator(alloc))
	err := byGroup(alloc, each, iw.Write)
	return errors.Join(err, iw.Close())
}

// byGroup calls fn with one record a group, in order, from the records
// each calls back with: a record holding several groups is sliced, a
// group spread over several records is concatenated, and each group's
// record is a compact copy (its own buffers).
func byGroup(alloc memory.Allocator, each func(func(arrow.Record) error) error, fn func(arrow.Record) error) error {
	var parts []arrow.Record
	var cur groupRef
	release := func() {
		for _, p := range parts {
			p.Release()
		}
		parts = parts[:0]
	}
	defer release()
	flush := func() error {
		if len(parts) == 0 {
			return nil
		}
		// Copied whole even from one slice: a slice's nested values
		// are written as far as its parent's reach, which differs
		// between the data files' records and the step file's.
		rec, err := concatRecords(alloc, parts)
		release()
		if err != nil {
			return err
		}
		defer rec.Release()
		return fn(rec)
	}
	err := each(func(rec arrow.Record) error {
		var err error
		gerr := eachGroup(rec, func(ref groupRef, start, end int) {
			if err != nil {
				return
			}
			if len(parts) > 0 && ref != cur {
				err = flush()
			}
			cur = ref
			parts = append(parts, rec.NewSlice(int64(start), int64(end)))
		})
		return errors.Join(gerr, err)
	})
	if err != nil {
		return err
	}
	return flush()
}

// concatRecords is recs (one schema) as one record.
func concatRecords(alloc memory.Allocator, recs []arrow.Record) (arrow.Record, error) {
	sc := recs[0].Schema()
	cols := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	for i := range cols {
		arrs := make([]arrow.Array, len(recs))
		for j, r := range recs {
			arrs[j] = r.Column(i)
		}
		c, err := array.Concatenate(arrs, alloc)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", sc.Field(i).Name, err)
		}
		cols[i] = c
	}
	return array.NewRecord(sc, cols, rows), nil
}
