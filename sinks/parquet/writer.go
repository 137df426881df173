package parquet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// The sink contract.
var (
	_ sinks.Sink    = (*Writer)(nil)
	_ sinks.Aborter = (*Writer)(nil)
)

// Defaults of Options.
const (
	DefaultFileRows     = 100_000
	DefaultFileBytes    = 512 << 20
	DefaultRowGroupRows = 4096
	DefaultCompression  = "zstd"
)

// Text bounds of the writer's buffers: a record is handed to the Parquet
// writer in slices of at most writeChunkBytes of text (at least one row),
// so that its column buffers are cut into pages as they fill rather than
// once the whole record is in; and a row group ends once it holds
// rowGroupBytes of text, so that the encoded pages held until a row group
// is written stay bounded too. Long answers thus cost the writer a few
// tens of MiB beside the record, not a copy of it.
var (
	writeChunkBytes = 16 << 20
	rowGroupBytes   = 64 << 20
)

// freeText are the leaf columns of unbounded text, by path.
var freeText = [][]string{
	{"task"},
	{"error"},
	{"messages", "list", "element", "content"},
	{"messages", "list", "element", "tool_calls", "list", "element", "arguments"},
}

// Options configure a Writer. Zero values take the defaults.
type Options struct {
	// FileRows commits a file once it holds at least this many rows
	// (checked between records). Default 100000.
	FileRows int
	// FileBytes commits a file once its estimated size reaches this many
	// bytes (checked between records). Default 512 MiB.
	FileBytes int64
	// RowGroupRows is the most rows of one row group. Default 4096. A
	// row group also ends once it holds 64 MiB of text.
	RowGroupRows int
	// Compression is zstd (default), snappy, gzip or none.
	Compression string
	// Prefix names the files: <Prefix>-NNNNN.parquet. Default "part".
	Prefix string
	// Metadata is key-value metadata written into every file (schema
	// version, config fingerprint, run id...). trajflow.schema_version is
	// set to schema.Version unless given.
	Metadata map[string]string
	// CommitMetadata, when set, is called as each file is finished, just
	// before its footer is written; the pairs it returns are added to the
	// file's key-value metadata (over Metadata's). For values that grow as
	// a run goes, such as how much of the input was read. An error it
	// returns aborts the file (what the file depends on could not be
	// made durable before it).
	CommitMetadata func() (map[string]string, error)
	// OnCommit, when set, is called after each file is committed with the
	// file's path and row count.
	OnCommit func(path string, rows int)
	// BeforeRename, when set, is called as each file is committed, after
	// it was written and synced and before it is renamed into place, with
	// its final path; an error aborts the commit. A companion file (the
	// step rows of the same trajectories) is committed there, so that it
	// is in place before the file that makes the commit visible.
	BeforeRename func(final string) error
	// OnAbort, when set, is called when the Writer is aborted; its error
	// is joined to Abort's.
	OnAbort func() error
}

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Validate reports every problem of the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.FileRows < 0 {
		errs = append(errs, fmt.Errorf("parquet: file_rows %d: must be >= 0", o.FileRows))
	}
	if o.FileBytes < 0 {
		errs = append(errs, fmt.Errorf("parquet: file_bytes %d: must be >= 0", o.FileBytes))
	}
	if o.RowGroupRows < 0 {
		errs = append(errs, fmt.Errorf("parquet: row_group_rows %d: must be >= 0", o.RowGroupRows))
	}
	if _, err := codec(o.Compression); err != nil {
		errs = append(errs, err)
	}
	if o.Prefix != "" && !validPrefix.MatchString(o.Prefix) {
		errs = append(errs, fmt.Errorf("parquet: prefix %q: want letters, digits, '_', '-' or '.', not starting with '.' or '-'", o.Prefix))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.FileRows == 0 {
		o.FileRows = DefaultFileRows
	}
	if o.FileBytes == 0 {
		o.FileBytes = DefaultFileBytes
	}
	if o.RowGroupRows == 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if o.Prefix == "" {
		o.Prefix = schema.PartPrefix
	}
	return o
}

// codec returns the named codec. zstd is at its fastest level (the default
// level spent about a fifth of a run's CPU in the codec, for files a few
// percent smaller), with an encoder of its own for each call (see
// zstdCodec; made at its first use): call it once per Writer.
func codec(name string) (compress.Codec, error) {
	switch strings.ToLower(name) {
	case "", "zstd":
		return newZstdCodec(), nil
	case "snappy":
		return &pq.Snappy, nil
	case "gzip":
		return &pq.Gzip, nil
	case "none", "uncompressed":
		return &pq.Uncompressed, nil
	}
	return nil, fmt.Errorf("parquet: compression %q: want zstd, snappy, gzip or none", name)
}

// Writer commits records to part files in one directory. It is not safe
// for concurrent use. One Writer at a time may own a directory. After an
// error from Write or Close the Writer is aborted: committed files stay,
// the uncommitted file is removed, and further writes fail.
type Writer struct {
	dir    string
	opts   Options
	wopts  []pq.WriterOption
	next   int // number of the next file to open
	conv   converter
	closed bool

	// The open file, if any.
	f     *durable.File
	pw    *pq.GenericWriter[row]
	rows  int
	group int // text of the open row group (rowText)
}

// New creates dir (and parents) and returns a Writer into it. Part numbers
// continue after the highest <Prefix>-NNNNN.parquet already in dir, so a
// resumed run never overwrites committed files. Temporary files left by a
// crashed writer with the same prefix are removed.
func New(dir string, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	c, _ := codec(opts.Compression)
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("parquet: create %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("parquet: list %s: %w", dir, err)
	}
	w := &Writer{dir: dir, opts: opts}
	for _, e := range entries {
		if n, ok := partNumber(e.Name(), opts.Prefix); ok {
			w.next = max(w.next, n+1)
		}
	}
	if err := RemoveStale(dir, opts.Prefix); err != nil {
		return nil, err
	}
	meta := map[string]string{schema.MetadataKey: schema.Version}
	for k, v := range opts.Metadata {
		meta[k] = v
	}
	w.wopts = []pq.WriterOption{
		pq.Compression(c),
		pq.DefaultEncodingFor(pq.ByteArray, &pq.Plain),
		pq.DataPageVersion(1),
		// No statistics in page headers. parquet-go writes each page's
		// min and max untruncated, twice (the deprecated and the current
		// fields): a page holding a 1 MiB message had a 4 MiB header, over
		// the 4 MiB that Arrow's reader accepts; it then read the column
		// as empty. Page bounds stay in the column index (truncated).
		pq.DataPageStatistics(false),
		pq.MaxRowsPerRowGroup(int64(opts.RowGroupRows)),
		pq.CreatedBy("trajflow", "", ""),
	}
	// Free-text columns get no min/max in the footer either: they are
	// written untruncated, and bounds of prose prune nothing.
	for _, path := range freeText {
		w.wopts = append(w.wopts, pq.SkipPageBounds(path...))
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.wopts = append(w.wopts, pq.KeyValueMetadata(k, meta[k]))
	}
	return w, nil
}

// RemoveStale removes the temporary files (".<prefix>-NNNNN.parquet.tmp")
// that a writer interrupted by a crash left in dir. Only one writer may use
// a directory at a time. A missing dir is no error.
func RemoveStale(dir, prefix string) error {
	if prefix == "" {
		prefix = schema.PartPrefix
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("parquet: list %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "."+prefix+"-") && strings.HasSuffix(name, schema.PartExt+schema.TempSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("parquet: remove stale %s: %w", filepath.Join(dir, name), err)
			}
		}
	}
	return nil
}

// partNumber parses "<prefix>-NNNNN.parquet".
func partNumber(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, schema.PartExt)
	if !ok || digits == "" {
		return 0, false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Dir returns the directory the Writer commits into.
func (w *Writer) Dir() string { return w.dir }

// Write appends every row of rec to the open file, opening one if needed,
// and commits the file when it reached FileRows or FileBytes. rec must be
// in collate's schema. A record is never split across files. The caller
// keeps ownership of rec and may release it once Write returns.
func (w *Writer) Write(ctx context.Context, rec arrow.Record) error {
	if w.closed {
		return errors.New("parquet: write after Close or Abort")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil || rec.NumRows() == 0 {
		return nil
	}
	if err := schema.Check(rec.Schema()); err != nil {
		return fmt.Errorf("parquet: %s: %w", w.dir, err)
	}
	if w.pw == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	rows := w.conv.convert(rec)
	err := w.write(rows)
	w.conv.reset()
	if err != nil {
		tmp := w.f.Name()
		return errors.Join(fmt.Errorf("parquet: write %s: %w", tmp, err), w.Abort())
	}
	w.rows += len(rows)
	if w.rows >= w.opts.FileRows || w.pw.Size() >= w.opts.FileBytes {
		return w.commit()
	}
	return nil
}

// write hands rows to the open file in slices of at most writeChunkBytes
// of text, ending the row group whenever it holds rowGroupBytes.
func (w *Writer) write(rows []row) error {
	for len(rows) > 0 {
		n, text := 1, rowText(&rows[0])
		for ; n < len(rows); n++ {
			t := rowText(&rows[n])
			if text+t > writeChunkBytes {
				break
			}
			text += t
		}
		if _, err := w.pw.Write(rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
		if w.group += text; w.group >= rowGroupBytes {
			if err := w.pw.Flush(); err != nil {
				return err
			}
			w.group = 0
		}
	}
	return nil
}

// rowText is the text of r's unbounded string columns (freeText, and a
// part's text and image).
func rowText(r *row) int {
	n := len(r.Task) + len(r.Error)
	for i := range r.Messages {
		m := &r.Messages[i]
		n += len(m.Content)
		for _, c := range m.ToolCalls {
			n += len(c.Arguments)
		}
		for _, p := range m.Parts {
			n += len(p.Text) + len(p.ImageURL)
		}
	}
	return n
}

func (w *Writer) open() error {
	name := fmt.Sprintf("%s-%05d.parquet", w.opts.Prefix, w.next)
	tmp := filepath.Join(w.dir, schema.TempName(name)) // the name RemoveStale finds
	f, err := durable.CreateAs(tmp, filepath.Join(w.dir, name), 0o644)
	if err != nil {
		return fmt.Errorf("parquet: open %s: %w", tmp, err)
	}
	w.next++
	w.f = f
	w.rows, w.group = 0, 0
	w.pw = pq.NewGenericWriter[row](f, w.wopts...)
	return nil
}

// commit finishes the open file and puts it in place (durable.File.Commit:
// synced, renamed, the directory synced). A failed commit aborts the
// Writer; when only the directory's sync failed, the file is in place.
func (w *Writer) commit() error {
	if w.opts.CommitMetadata != nil {
		extra, err := w.opts.CommitMetadata()
		if err != nil {
			return errors.Join(fmt.Errorf("parquet: commit of %s: %w", w.f.Name(), err), w.Abort())
		}
		keys := make([]string, 0, len(extra))
		for k := range extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			w.pw.SetKeyValueMetadata(k, extra[k])
		}
	}
	if err := w.pw.Close(); err != nil {
		tmp := w.f.Name()
		return errors.Join(fmt.Errorf("parquet: close %s: %w", tmp, err), w.Abort())
	}
	w.f.BeforeRename = w.opts.BeforeRename
	if err := w.f.Commit(); err != nil {
		return errors.Join(fmt.Errorf("parquet: %w", err), w.Abort())
	}
	path, rows := w.f.Final(), w.rows
	w.pw, w.f, w.rows = nil, nil, 0
	if w.opts.OnCommit != nil {
		w.opts.OnCommit(path, rows)
	}
	return nil
}

// Commit commits the open file now, if any, whatever its size; the next
// Write opens a new one. A run calls it on a timer (output.commit_interval)
// so that a crash loses at most that much finished work.
func (w *Writer) Commit(ctx context.Context) error {
	if w.closed {
		return errors.New("parquet: commit after Close or Abort")
	}
	if w.pw == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.commit()
}

// Close commits the open file, if any. It commits even when ctx is done:
// the open file holds only whole records, so an interrupted run keeps
// them; call Abort instead to discard them. After Close the Writer accepts
// no more records.
func (w *Writer) Close(ctx context.Context) error {
	_ = ctx
	if w.closed {
		return nil
	}
	w.closed = true
	if w.pw == nil {
		return nil
	}
	return w.commit()
}

// Abort removes the open, uncommitted file. Committed files stay. After
// Abort the Writer accepts no more records. The error says what failed to
// close or remove the file (OnAbort's joined).
func (w *Writer) Abort() error {
	w.closed = true
	var err error
	if w.opts.OnAbort != nil {
		err = w.opts.OnAbort()
	}
	if w.f != nil {
		err = errors.Join(err, w.f.Abort())
	}
	w.pw, w.f, w.rows = nil, nil, 0
	w.conv.reset()
	return err
}
