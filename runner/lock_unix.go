//go:build unix

package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/trajflow/trajflow/schema"
)

// LockFile is held by a running run in its output directory, so that two
// runs never write one directory at once.
const LockFile = schema.LockFile

// lockDir takes the output directory's lock and returns its release. The
// lock is the kernel's (flock): it goes with the process, even on kill -9.
// The file holds the holder's pid, for the error another run reports; a
// lock whose pid cannot be written is given up. The release returns the
// unlock's and the close's errors.
func lockDir(dir string) (func() error, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path) // only for the message: the pid, if readable
		err = errors.Join(err, f.Close())
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("output.dir %s is in use by another trajflow run (pid %s)", dir, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("output.dir: lock %s: %w", path, err)
	}
	release := func() error {
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
	}
	if err := writePID(f); err != nil {
		return nil, errors.Join(fmt.Errorf("output.dir: lock %s: %w", path, err), release())
	}
	return release, nil
}

// writePID replaces the lock file's content with this process's pid.
func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}
