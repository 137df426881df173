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

// readLine returns the next line without its line ending. The slice is
// valid until the next call.
func (r *jsonlReader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.buf = append(r.buf, chunk...)
		switch {
		case err == nil:
			r.line++
			line := r.buf[:len(r.buf)-1]
			return bytes.TrimSuffix(line, []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			r.line++
			return bytes.TrimSuffix(r.buf, []byte("\r")), nil
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
