package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// Identity names the input a run read: the configured path and a
// fingerprint of the bytes read from it. A resumed run compares it with
// the identity its committed files recorded (Verify), so that a different
// file, or the same path holding other data, is not mistaken for the input
// the committed work came from.
//
// A JSONL reader hashes the bytes it reads from the start of the file (the
// raw bytes, before gunzipping) as it streams, so Bytes grows as the run
// reads and a run with a small limit hashes little. A Parquet reader reads
// the file out of order, so it hashes the whole file when it opens it.
type Identity struct {
	// Path is the path as configured.
	Path string `json:"path"`
	// Size is the file's size when it was opened.
	Size int64 `json:"size"`
	// Bytes is how many bytes from the start of the file the hash covers.
	Bytes int64 `json:"bytes"`
	// SHA256 is the hex SHA-256 of those bytes.
	SHA256 string `json:"sha256"`
}

// hashingReader hashes what is read through it. Sum may be called from
// another goroutine than Read.
type hashingReader struct {
	r  io.Reader
	mu sync.Mutex
	h  hash.Hash
	n  int64
}

func newHashingReader(r io.Reader) *hashingReader {
	return &hashingReader{r: r, h: sha256.New()}
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	if n > 0 {
		hr.mu.Lock()
		hr.h.Write(p[:n])
		hr.n += int64(n)
		hr.mu.Unlock()
	}
	return n, err
}

// sum returns the number of bytes read so far and their hash.
func (hr *hashingReader) sum() (int64, string) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return hr.n, hex.EncodeToString(hr.h.Sum(nil))
}

// hashFile hashes the whole of f from its start, then seeks back.
func hashFile(f *os.File) (int64, string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ErrOtherInput is returned by Verify when the file at a path is not the
// input an identity describes.
var ErrOtherInput = errors.New("not the input the committed work was made from")

// fileKind names a file mode's type.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file"
}

// Verify checks that the file at path starts with the bytes id describes:
// it hashes the first id.Bytes bytes of the file (streaming, once) and
// compares. A file shorter than that, or one whose bytes hash otherwise,
// is an error wrapping ErrOtherInput. A file that grew past what was
// read (appended rows) still verifies.
func Verify(path string, id Identity) error {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		// A pipe gives its bytes once: checking them would take them
		// from the run (and wait for a writer).
		return fmt.Errorf("source: %s is not a regular file (%s): a resume reads the input once more to check that it is the one the committed work read, which a pipe cannot give; copy it to a file, or resume with --allow-config-change to skip the check", path, fileKind(st.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, id.Bytes))
	if err != nil {
		return fmt.Errorf("source: %s: %w", path, err)
	}
	if n < id.Bytes {
		return fmt.Errorf("%s is %w: it has %d bytes, the committed work read %d bytes of %s", path, ErrOtherInput, n, id.Bytes, id.Path)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != id.SHA256 {
		return fmt.Errorf("%s is %w: its first %d bytes have SHA-256 %.16s…, those %s had %.16s…", path, ErrOtherInput, id.Bytes, got, id.Path, id.SHA256)
	}
	return nil
}

// Fractioner is a Reader that knows the share of its input read so far
// (the JSONL reader); it may be called from another goroutine than Next.
type Fractioner interface {
	Fraction() (f float64, ok bool)
}

// Fraction is the share of a streamed input read so far (its bytes read
// over its size, before any decompression), for an estimate of the whole
// run; ok is false for an input read whole at open (Parquet) or of
// unknown size.
func (b *base) Fraction() (f float64, ok bool) {
	if b.hr == nil || b.size <= 0 {
		return 0, false
	}
	b.hr.mu.Lock()
	n := b.hr.n
	b.hr.mu.Unlock()
	return min(float64(n)/float64(b.size), 1), true
}
