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
