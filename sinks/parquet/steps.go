package parquet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

// StepWriter writes step rows into one directory, each file the companion
// of a trajectory part file: Commit(name) commits the steps written since
// the last commit under the trajectory file's name. It is not safe for
// concurrent use.
type StepWriter struct {
	dir   string
	wopts []pq.WriterOption
	f     *durable.File
	pw    *pq.GenericWriter[stepRow]
	rows  []stepRow
	// copied are rows copied from a StepReader, not yet written.
	copied []stepRow
}

// NewStepWriter creates dir and returns a StepWriter into it, writing
// meta (with the steps schema version) into every file. Temporary files a
// crashed writer left are removed.
func NewStepWriter(dir, compression string, meta map[string]string) (*StepWriter, error) {
	c, err := codec(compression)
	if err != nil {
		return nil, err
	}
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("parquet: create %s: %w", dir, err)
	}
	if err := RemoveStale(dir, schema.PartPrefix); err != nil {
		return nil, err
	}
	w := &StepWriter{dir: dir}
	w.wopts = []pq.WriterOption{
		pq.Compression(c), pq.DefaultEncodingFor(pq.ByteArray, &pq.Plain), pq.DataPageVersion(1),
		pq.DataPageStatistics(false), pq.MaxRowsPerRowGroup(DefaultRowGroupRows), pq.CreatedBy("trajflow", "", ""),
		pq.SkipPageBounds("anchor_obs"),
	}
	all := map[string]string{schema.StepsMetadataKey: schema.StepsVersion}
	for k, v := range meta {
		if k != schema.MetadataKey {
			all[k] = v
		}
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.wopts = append(w.wopts, pq.KeyValueMetadata(k, all[k]))
	}
	return w, nil
}

// Dir returns the directory the StepWriter commits into.
func (w *StepWriter) Dir() string { return w.dir }

func (w *StepWriter) open() error {
	if w.pw != nil {
		return nil
	}
	// Named as RemoveStale finds it; its final name comes with Commit.
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	tmp := filepath.Join(w.dir, schema.TempName(schema.PartPrefix+"-steps-"+hex.EncodeToString(b[:])+schema.PartExt))
	f, err := durable.CreateAs(tmp, tmp, 0o644)
	if err != nil {
		return fmt.Errorf("parquet: open a steps file in %s: %w", w.dir, err)
	}
	w.f = f
	w.pw = pq.NewGenericWriter[stepRow](f, w.wopts...)
	return nil
}

// WriteRows appends rows (collate.StepRows) to the open file, opening
// one if needed.
func (w *StepWriter) WriteRows(rows []schema.StepRow) error {
	if err := w.open(); err != nil {
		return err
	}
	if err := w.flushCopied(); err != nil {
		return err
	}
	w.rows = grow(w.rows, len(rows))
	for i := range rows {
		w.rows[i] = stepRowOf(&rows[i])
	}
	if _, err := w.pw.Write(w.rows); err != nil {
		tmp := w.f.Name()
		return errors.Join(fmt.Errorf("parquet: write %s: %w", tmp, err), w.Abort())
	}
	clear(w.rows)
	return nil
}

// Commit finishes the open file (an empty one when nothing was written
// since the last commit, so that every trajectory file has its steps
// file) and puts it at name in the directory (durable.File.CommitAs:
// synced, renamed, the directory synced).
func (w *StepWriter) Commit(name string) error {
	if err := w.open(); err != nil {
		return err
	}
	if err := w.flushCopied(); err != nil {
		return err
	}
	if err := w.pw.Close(); err != nil {
		tmp := w.f.Name()
		return errors.Join(fmt.Errorf("parquet: close %s: %w", tmp, err), w.Abort())
	}
	f := w.f
	w.pw, w.f = nil, nil
	if err := f.CommitAs(filepath.Join(w.dir, name)); err != nil {
		return fmt.Errorf("parquet: %w", err)
	}
	return nil
}

// Abort removes the open, uncommitted file, if any, and returns what
// failed to close or remove it.
func (w *StepWriter) Abort() error {
	clear(w.copied)
	w.copied = w.copied[:0]
	var err error
	if w.f != nil {
		err = w.f.Abort()
	}
	w.pw, w.f = nil, nil
	return err
}

// ErrUnpaired is returned by PairSteps for a trajectory part file without
// its steps file.
var ErrUnpaired = errors.New("a trajectory part file has no steps file")

// PairSteps makes the steps directory agree with the trajectory
// directory before a resume: a steps file whose trajectory file is
// missing (a crash between the two renames of a commit: the steps file is
// renamed first) is removed, since its trajectories were never committed
// and the resumed run redoes them. A trajectory file without its steps
// file is ErrUnpaired. Missing directories are no error.
func PairSteps(dataDir, stepsDir string) error {
	data, err := partNames(dataDir)
	if err != nil {
		return err
	}
	steps, err := partNames(stepsDir)
	if err != nil {
		return err
	}
	for name := range steps {
		if !data[name] {
			if err := os.Remove(filepath.Join(stepsDir, name)); err != nil {
				return fmt.Errorf("parquet: remove uncommitted %s: %w", filepath.Join(stepsDir, name), err)
			}
		}
	}
	for name := range data {
		if !steps[name] {
			return fmt.Errorf("%w: %s has no %s", ErrUnpaired, filepath.Join(dataDir, name), filepath.Join(stepsDir, name))
		}
	}
	return nil
}

// partNames lists the committed part files of dir by name.
func partNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet: list %s: %w", dir, err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if _, ok := partNumber(e.Name(), schema.PartPrefix); ok {
			out[e.Name()] = true
		}
	}
	return out, nil
}
