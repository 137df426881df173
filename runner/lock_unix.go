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
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("output.dir %s is in use by another trajflow run (pid %s)", dir, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("output.dir: lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
