package parquet

import (
	"errors"
	"fmt"
	"io"
	"os"

	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/schema"
)

// StepGroup is the group a step row belongs to: the rows of one run's
// task attempt.
type StepGroup struct {
	RunID     string
	TaskIndex int64
	Attempt   int32
}

// StepReader reads the rows of one steps file in order, to copy them into
// a StepWriter unchanged (trajflow merge). It is not safe for concurrent
// use.
type StepReader struct {
	path string
	f    *os.File
	r    *pq.GenericReader[stepRow]
	buf  []stepRow
	i    int
	err  error // io.EOF once the file is read
}

// stepReadRows is the number of rows a StepReader reads at once.
const stepReadRows = 256

// OpenSteps opens a steps file, refusing one whose steps schema version
// (trajflow.steps_schema_version) is not schema.StepsVersion, naming the
// file and its version.
func OpenSteps(path string) (*StepReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("parquet: %w", err)
	}
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("parquet: %s: %w", path, err)
	}
	if v, _ := pf.Lookup(schema.StepsMetadataKey); v != schema.StepsVersion {
		_ = f.Close() // best effort: read only
		if v == "" {
			v = "none"
		}
		return nil, fmt.Errorf("parquet: %s: steps schema version %s, want %s", path, v, schema.StepsVersion)
	}
	return &StepReader{path: path, f: f, r: pq.NewGenericReader[stepRow](pf)}, nil
}

// Path returns the file's path.
func (r *StepReader) Path() string { return r.path }

// fill makes r.buf[r.i] the next row; false at the end or on an error
// (r.err).
func (r *StepReader) fill() bool {
	if r.i < len(r.buf) {
		return true
	}
	if r.err != nil {
		return false
	}
	// A fresh buffer each time: the rows handed to a StepWriter keep their
	// slices until it writes them.
	buf := make([]stepRow, stepReadRows)
	n, err := r.r.Read(buf)
	r.buf, r.i = buf[:n], 0
	if err != nil {
		r.err = err
		if !errors.Is(err, io.EOF) {
			r.err = fmt.Errorf("parquet: read %s: %w", r.path, err)
		}
	}
	return n > 0
}

// Next returns the group of the next row and its rollout and step, with ok
// false at the end of the file.
func (r *StepReader) Next() (g StepGroup, rollout, step int32, ok bool, err error) {
	if !r.fill() {
		if errors.Is(r.err, io.EOF) {
			return StepGroup{}, 0, 0, false, nil
		}
		return StepGroup{}, 0, 0, false, r.err
	}
	row := &r.buf[r.i]
	return StepGroup{RunID: row.RunID, TaskIndex: row.TaskIndex, Attempt: row.Attempt}, row.RolloutIndex, row.Step, true, nil
}

// CopyTo moves the next row into w's open file, as it is. Call it after
// Next returned ok.
func (r *StepReader) CopyTo(w *StepWriter) error {
	if !r.fill() {
		return fmt.Errorf("parquet: %s: no row to copy", r.path)
	}
	row := r.buf[r.i]
	r.buf[r.i] = stepRow{}
	r.i++
	return w.add(row)
}

// Close closes the file.
func (r *StepReader) Close() error {
	if err := r.r.Close(); err != nil {
		_ = r.f.Close() // best effort: read only
		return fmt.Errorf("parquet: %s: %w", r.path, err)
	}
	return r.f.Close()
}

// stepCopyRows is the number of copied rows a StepWriter holds before it
// writes them.
const stepCopyRows = 256

// add appends a copied row to the open file (opening one if needed),
// writing the held rows once there are stepCopyRows of them.
func (w *StepWriter) add(row stepRow) error {
	if err := w.open(); err != nil {
		return err
	}
	w.copied = append(w.copied, row)
	if len(w.copied) >= stepCopyRows {
		return w.flushCopied()
	}
	return nil
}

// flushCopied writes the copied rows held.
func (w *StepWriter) flushCopied() error {
	if len(w.copied) == 0 {
		return nil
	}
	_, err := w.pw.Write(w.copied)
	clear(w.copied)
	w.copied = w.copied[:0]
	if err != nil {
		tmp := w.f.Name()
		return errors.Join(fmt.Errorf("parquet: write %s: %w", tmp, err), w.Abort())
	}
	return nil
}
