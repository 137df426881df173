package resume

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

// LockDir takes the output directory's lock (durable.TryLock) and returns
// its release. The lock goes with the process, even on kill -9. The file
// holds the holder's pid, for the error another run reports; a lock whose
// pid cannot be written is given up. The release returns the unlock's and
// the close's errors.
func LockDir(dir string) (func() error, error) {
	path := filepath.Join(dir, schema.LockFile)
	l, err := durable.TryLock(path)
	if errors.Is(err, durable.ErrLocked) {
		return nil, fmt.Errorf("output.dir %s is in use by another trajflow run (pid %s)", dir, durable.HolderPID(path))
	}
	if err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	release := func() error {
		if err := l.Unlock(); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		return nil
	}
	if err := l.WritePID(); err != nil {
		return nil, errors.Join(fmt.Errorf("output.dir: lock %s: %w", path, err), release())
	}
	return release, nil
}
