//go:build unix

package durable

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// TryLock creates path (mode 0644) if needed and takes the kernel's
// exclusive lock on it without waiting. When another process holds it,
// the error wraps ErrLocked. The lock goes with the process, even on
// kill -9.
func TryLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		cerr := f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.Join(fmt.Errorf("lock %s: %w", path, ErrLocked), cerr)
		}
		return nil, errors.Join(fmt.Errorf("lock %s: %w", path, err), cerr)
	}
	return &Lock{f: f, path: path}, nil
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
