package durable

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// DiskFull reports whether err is a full disk: no space left on the
// device, or the user's quota exceeded.
func DiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// IOError reports whether err is an I/O error of the device (EIO): after
// a failed fsync the kernel may have dropped the data, so the file is
// never trusted again (a commit that meets one fails, and is redone from
// the start by a resume, not retried on the same descriptor).
func IOError(err error) bool {
	return errors.Is(err, syscall.EIO)
}

// FailedPath is the path of the first file operation that failed in
// err's tree (an *fs.PathError, or an *os.LinkError's new name), "" when
// there is none.
func FailedPath(err error) string {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Path
	case errors.As(err, &le):
		return le.New
	}
	return ""
}

// SpaceError is a write refused for space (ENOSPC, EDQUOT) with what the
// file needed: Size bytes in all (those written before and the refused
// write's), at Path. Its message is Err's; errors.Is and errors.As see
// through it.
type SpaceError struct {
	Path string
	Size int64
	Err  error
}

func (e *SpaceError) Error() string { return e.Err.Error() }
func (e *SpaceError) Unwrap() error { return e.Err }

// needing wraps err in a *SpaceError when it is a full disk.
func needing(path string, size int64, err error) error {
	if !DiskFull(err) {
		return err
	}
	var se *SpaceError
	if errors.As(err, &se) {
		return err
	}
	return &SpaceError{Path: path, Size: size, Err: err}
}

// NeedSpace wraps err, when it is a full disk, with the bytes the file at
// path needed in all (for writers that write through an *os.File, not a
// File); other errors are returned as they are.
func NeedSpace(path string, size int64, err error) error { return needing(path, size, err) }

// Needed is the *SpaceError in err's tree: the file a full disk refused
// and the bytes it needed.
func Needed(err error) (*SpaceError, bool) {
	var se *SpaceError
	ok := errors.As(err, &se)
	return se, ok
}
