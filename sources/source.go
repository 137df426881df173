package sources

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Reader streams tasks. It is not safe for concurrent use.
type Reader interface {
	// Next returns the next selected task, or io.EOF after the last one.
	// After any other error the reader is done and returns that error
	// again.
	Next(ctx context.Context) (*pipeline.Task, error)
	// Close releases the file.
	Close() error
	// Identity names the file and fingerprints what was read of it so
	// far. It may be called from another goroutine than Next.
	Identity() Identity
}

// Reject is a bad row passed over under on_bad_row: skip.
type Reject struct {
	// Where names the row: "tasks.jsonl:17" or "tasks.parquet:row 16".
	Where string
	// Raw is the row as read (a JSONL line; a Parquet row as JSON, or
	// empty when it could not be converted).
	Raw []byte
	// Reason says what is wrong with the row.
	Reason string
}

// Options are the caller's hooks into a Reader.
type Options struct {
	// OnReject is called for each bad row when the config's on_bad_row is
	// skip. An error it returns stops the reader (Next returns it). Nil
	// drops bad rows silently.
	OnReject func(Reject) error
	// Skip, when set, is asked about every selected row before it is
	// decoded; rows it returns true for are passed over (resume: work
	// already committed). It does not change which rows limit, offset and
	// shard select.
	Skip func(taskIndex int64) bool
	// OnInvalidUTF8 is called for each selected JSONL row that held bytes
	// that are not UTF-8, after they were replaced (each maximal run of
	// invalid bytes by one U+FFFD, the row then read as usual), so that the
	// caller can count them. Nil: replaced silently.
	OnInvalidUTF8 func(where string)
}

// replacementChar replaces each maximal run of invalid UTF-8 bytes.
var replacementChar = []byte("\uFFFD")

// Formats a source can read.
const (
	FormatJSONL   = "jsonl"
	FormatParquet = "parquet"
)

// Open opens the source the config names. The format comes from
// cfg.Format, else from the path's extension (.jsonl, .json, .ndjson,
// any of them with .gz; .parquet, .pq). A missing, unreadable or empty file
// is an error naming the path; an empty file (or one of blank lines only)
// is reported by the first Next as "no rows".
func Open(cfg Config, opts Options) (Reader, error) {
	if cfg.Path == "" {
		return nil, errors.New("source.path: required (a .jsonl or .parquet file)")
	}
	win, err := newWindow(cfg)
	if err != nil {
		return nil, err
	}
	skipBad := false
	switch cfg.OnBadRow {
	case "", "error":
	case "skip":
		skipBad = true
	default:
		return nil, fmt.Errorf("source.on_bad_row: %q is not one of error, skip", cfg.OnBadRow)
	}
	format, err := formatOf(cfg)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("source: %w", err)
	}
	if st.IsDir() {
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("source: %s is a directory, want a file", cfg.Path)
	}
	maxLine := cfg.MaxLineBytes
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	b := base{path: cfg.Path, size: st.Size(), win: win, opts: opts, skipBad: skipBad, maxLine: maxLine}
	switch cfg.TaskIndex {
	case "", TaskIndexLine:
	case TaskIndexDedup:
		b.seen = map[[sha256.Size]byte]int64{}
	case TaskIndexDedupLines:
		b.seen = map[[sha256.Size]byte]int64{}
		b.rawDedup = true
	default:
		_ = f.Close() // best effort: read only
		return nil, fmt.Errorf("source.task_index: %q is not one of line, dedup, dedup_lines", cfg.TaskIndex)
	}
	switch format {
	case FormatParquet:
		n, sum, err := hashFile(f)
		if err != nil {
			_ = f.Close() // best effort: read only
			return nil, fmt.Errorf("source: %s: %w", cfg.Path, err)
		}
		b.fullHash = &Identity{Path: cfg.Path, Size: st.Size(), Bytes: n, SHA256: sum}
		r, err := openParquet(f, st.Size(), b)
		if err != nil {
			_ = f.Close() // best effort: read only
			return nil, err
		}
		return r, nil
	default:
		if format == FormatOpenAIBatch {
			b.batch = batchIDs{}
		}
		r, err := openJSONL(f, b)
		if err != nil {
			_ = f.Close() // best effort: read only
			return nil, err
		}
		return r, nil
	}
}

// formatOf picks the reader for a config.
func formatOf(cfg Config) (string, error) {
	switch cfg.Format {
	case FormatJSONL, FormatParquet, FormatOpenAIBatch:
		return cfg.Format, nil
	case "":
	default:
		return "", fmt.Errorf("source.format: %q is not one of jsonl, parquet, openai_batch", cfg.Format)
	}
	name := strings.ToLower(strings.TrimSuffix(strings.ToLower(cfg.Path), ".gz"))
	switch {
	case strings.HasSuffix(name, ".jsonl"), strings.HasSuffix(name, ".json"), strings.HasSuffix(name, ".ndjson"):
		return FormatJSONL, nil
	case strings.HasSuffix(name, ".parquet"), strings.HasSuffix(name, ".pq"):
		if strings.HasSuffix(strings.ToLower(cfg.Path), ".gz") {
			return "", fmt.Errorf("source.path: %s: gzip-compressed Parquet is not supported (Parquet compresses its own pages)", cfg.Path)
		}
		return FormatParquet, nil
	}
	return "", fmt.Errorf("source.path: %s: cannot tell the format from the extension (want .jsonl, .jsonl.gz, .json, .parquet); set source.format", cfg.Path)
}

// window is the set of rows a config selects: offset <= i < end and
// i % count == index.
type window struct {
	offset, end  int64 // end < 0: no limit
	index, count int64
}

func newWindow(cfg Config) (window, error) {
	var errs []error
	if cfg.Offset < 0 {
		errs = append(errs, fmt.Errorf("source.offset: must be >= 0, got %d", cfg.Offset))
	}
	if cfg.Limit < 0 {
		errs = append(errs, fmt.Errorf("source.limit: must be >= 0, got %d", cfg.Limit))
	}
	count := cfg.Shard.Count
	if count == 0 {
		count = 1
	}
	if count < 0 {
		errs = append(errs, fmt.Errorf("source.shard.count: must be >= 1, got %d", count))
	} else if cfg.Shard.Index < 0 || cfg.Shard.Index >= count {
		errs = append(errs, fmt.Errorf("source.shard.index: must be in [0, %d), got %d", count, cfg.Shard.Index))
	}
	if len(errs) > 0 {
		return window{}, errors.Join(errs...)
	}
	w := window{offset: cfg.Offset, end: -1, index: int64(cfg.Shard.Index), count: int64(count)}
	if cfg.Limit > 0 {
		w.end = cfg.Offset + cfg.Limit
	}
	return w, nil
}

// past reports whether row i and every later row are outside the window.
func (w window) past(i int64) bool { return w.end >= 0 && i >= w.end }

// keep reports whether row i is selected.
func (w window) keep(i int64) bool {
	return i >= w.offset && !w.past(i) && i%w.count == w.index
}

// base is what every reader shares: the path, the selection and the
// caller's hooks.
type base struct {
	path    string
	size    int64
	maxLine int64 // source.max_line_bytes
	win     window
	opts    Options
	skipBad bool
	// fullHash is the identity of a file hashed whole at open; hr hashes
	// a streamed file as it is read. One of them is set.
	fullHash *Identity
	hr       *hashingReader
	// seen maps each distinct row's canonical-JSON hash to its task index
	// under task_index: dedup; nil under line.
	seen     map[[sha256.Size]byte]int64
	rawDedup bool  // dedup_lines: rows compared byte for byte
	distinct int64 // task indices given under dedup
	// batch holds the custom_ids read under format openai_batch; nil
	// otherwise.
	batch batchIDs
}

// taskIndex numbers row i (its 0-based position among the rows). Under
// task_index: line it is i. Under dedup it is the number of distinct rows
// before the row's first appearance, and dup reports a later copy. Every
// row must be passed, in order, selected or not, so that the numbering
// does not depend on the window.
func (b *base) taskIndex(i int64, row []byte) (index int64, dup bool) {
	if b.seen == nil {
		return i, false
	}
	var k [sha256.Size]byte
	if b.rawDedup {
		k = sha256.Sum256(row)
	} else {
		k = sha256.Sum256(canonicalJSON(row))
	}
	if idx, ok := b.seen[k]; ok {
		return idx, true
	}
	idx := b.taskIndexUnique()
	b.seen[k] = idx
	return idx, false
}

// canonicalJSON is a row's JSON with sorted object keys and no
// insignificant whitespace (numbers as written); a row that is not valid
// JSON is returned trimmed, as it is.
func canonicalJSON(row []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(row))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return bytes.TrimSpace(row)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bytes.TrimSpace(row)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return bytes.TrimSpace(row)
	}
	return out
}

// Identity names the file and fingerprints what was read of it.
func (b *base) Identity() Identity {
	if b.fullHash != nil {
		return *b.fullHash
	}
	id := Identity{Path: b.path, Size: b.size}
	if b.hr != nil {
		id.Bytes, id.SHA256 = b.hr.sum()
	}
	return id
}

// bad handles a bad row: under skip it is handed to OnReject and nil is
// returned; otherwise the row's error is.
func (b *base) bad(err error, raw []byte) error {
	if !b.skipBad {
		return err
	}
	if b.opts.OnReject == nil {
		return nil
	}
	rej := Reject{Raw: append([]byte(nil), raw...), Reason: err.Error()}
	var re *RowError
	if errors.As(err, &re) {
		rej.Where, rej.Reason = re.Where, re.Reason
	}
	if err := b.opts.OnReject(rej); err != nil {
		return fmt.Errorf("source: rejecting %s: %w", rej.Where, err)
	}
	return nil
}

// repair replaces the invalid UTF-8 of a row and reports it.
func (b *base) repair(where string, row []byte) []byte {
	if b.opts.OnInvalidUTF8 != nil {
		b.opts.OnInvalidUTF8(where)
	}
	return bytes.ToValidUTF8(row, replacementChar)
}

// skip reports whether the caller's Skip hook passes over row i.
func (b *base) skip(i int64) bool { return b.opts.Skip != nil && b.opts.Skip(i) }

// taskIndexUnique numbers a row that could not be read as JSON under
// task_index: dedup: it is a task of its own.
func (b *base) taskIndexUnique() int64 {
	b.distinct++
	return b.distinct - 1
}
