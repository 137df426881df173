package sources

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
)

// jsonlReader reads one JSON object per line. Only the current line is held
// in memory.
type jsonlReader struct {
	base
	f   *os.File
	gz  *gzip.Reader
	br  *bufio.Reader
	buf []byte

	line int64 // physical number (1-based) of the last line read
	rows int64 // rows seen so far: the next row's task index
	err  error // sticky: io.EOF or the error that stopped the reader
}

var _ Reader = (*jsonlReader)(nil)

var gzipMagic = []byte{0x1f, 0x8b}

// openJSONL opens a JSONL reader over f, gunzipping when the file starts
// with gzip's magic bytes (whatever its name).
func openJSONL(f *os.File, b base) (*jsonlReader, error) {
	r := &jsonlReader{base: b, f: f}
	r.hr = newHashingReader(f)
	br := bufio.NewReaderSize(r.hr, 64<<10)
	head, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("source: %s: %w", b.path, err)
	}
	if len(head) == 0 {
		return nil, fmt.Errorf("source: %s: no rows (the file is empty)", b.path)
	}
	if bytes.Equal(head, gzipMagic) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("source: %s: %w", b.path, err) // "gzip: invalid header"
		}
		r.gz = gz
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	r.br = br
	return r, nil
}

// ErrLineTooLong is wrapped by the RowError of a line over
// source.max_line_bytes: the line was read past without being held. The
// remedy is in the config (raise the limit, or on_bad_row: skip), so the
// command treats it as a config error.
var ErrLineTooLong = errors.New("the line is longer than source.max_line_bytes")

// keepOfLongLine is how much of an over-long line a reject keeps.
const keepOfLongLine = 1 << 10

// readLine returns the next line without its line ending. The slice is
// valid until the next call. A line longer than maxLine is read past
// without being held: ErrLineTooLong, with its first bytes in r.buf.
func (r *jsonlReader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	long := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !long {
			if int64(len(r.buf)+len(chunk)) > r.maxLine+2 { // +2: "\r\n"
				long = true
				n := max(0, min(keepOfLongLine-len(r.buf), len(chunk)))
				r.buf = append(r.buf, chunk[:n]...)
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			r.line++
			line := bytes.TrimSuffix(r.buf[:len(r.buf)-1], []byte("\r"))
			if long || int64(len(line)) > r.maxLine {
				return r.buf[:min(len(r.buf), keepOfLongLine)], ErrLineTooLong
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			r.line++
			line := bytes.TrimSuffix(r.buf, []byte("\r"))
			if long || int64(len(line)) > r.maxLine {
				return r.buf[:min(len(r.buf), keepOfLongLine)], ErrLineTooLong
			}
			return line, nil
		default:
			return nil, err
		}
	}
}

// where names line n of the file.
func (r *jsonlReader) where(n int64) string { return r.path + ":" + strconv.FormatInt(n, 10) }

func (r *jsonlReader) Next(ctx context.Context) (*pipeline.Task, error) {
	for {
		if r.err != nil {
			return nil, r.err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.win.past(r.rows) {
			r.err = io.EOF
			return nil, io.EOF
		}
		line, err := r.readLine()
		if err == io.EOF {
			r.err = io.EOF
			if r.rows == 0 {
				r.err = fmt.Errorf("source: %s: no rows (only blank lines)", r.path)
			}
			return nil, r.err
		}
		if errors.Is(err, ErrLineTooLong) {
			// A row all the same: it counts, and is bad where the run
			// reads it.
			i := r.rows
			r.rows++
			if !r.win.keep(i) {
				continue
			}
			bad := &RowError{Where: r.where(r.line), Reason: fmt.Sprintf("%v (%d bytes): not read", ErrLineTooLong, r.maxLine), Err: ErrLineTooLong}
			if err := r.bad(bad, line); err != nil {
				r.err = err
				return nil, err
			}
			continue
		}
		if err != nil {
			r.err = fmt.Errorf("source: %s: after line %d: %w", r.path, r.line, err)
			return nil, r.err
		}
		if r.line == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
		}
		if blank(line) {
			continue
		}
		if r.batch != nil {
			if err := r.batch.see(r.path, r.line, line); err != nil {
				r.err = err
				return nil, err
			}
		}
		i := r.rows
		r.rows++
		idx, dup := r.taskIndex(i, line)
		if dup || !r.win.keep(i) || r.skip(idx) {
			continue
		}
		if !utf8.Valid(line) {
			line = r.repair(r.where(r.line), line)
		}
		parse := parseRow
		if r.batch != nil {
			parse = parseBatchLine
		}
		task, err := parse(r.where(r.line), idx, line)
		if err != nil {
			if err := r.bad(err, line); err != nil {
				r.err = err
				return nil, err
			}
			continue
		}
		return task, nil
	}
}

func (r *jsonlReader) Close() error {
	if r.err == nil {
		r.err = errors.New("source: reader closed")
	}
	var errs []error
	if r.gz != nil {
		errs = append(errs, r.gz.Close())
	}
	errs = append(errs, r.f.Close())
	return errors.Join(errs...)
}

// blank reports whether a line holds only whitespace.
func blank(line []byte) bool {
	return len(bytes.TrimSpace(line)) == 0
}
