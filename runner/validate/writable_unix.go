//go:build unix

package validate

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// canWrite asks the kernel whether dir may be written (access(2) with
// W_OK: a read-only file system says so even to root).
func canWrite(dir string) error {
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return &fs.PathError{Op: "write", Path: dir, Err: err}
	}
	return nil
}
