//go:build unix

package serve

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile is held by a running service in its served directory, so that
// two services never hand out the steps of one output.
const lockFile = ".lock"

// lock takes the served directory's lock (flock: it goes with the
// process, even on kill -9) and returns its release, which returns the
// unlock's and the close's errors.
func lock(dir string) (func() error, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		err = errors.Join(err, f.Close())
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("output.dir: %s is in use by another trajflow serve", dir)
		}
		return nil, fmt.Errorf("output.dir: lock %s: %w", path, err)
	}
	return func() error {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if err != nil {
			err = fmt.Errorf("unlock: %w", err)
		}
		if cerr := f.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			return fmt.Errorf("output.dir: lock %s: %w", path, err)
		}
		return nil
	}, nil
}
