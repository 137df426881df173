package serve

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

// lock takes the served directory's lock (internal/durable's flock: it
// goes with the process, even on kill -9), so that two services never hand
// out the steps of one output, and returns its release, which returns the
// unlock's and the close's errors. Held by another service, the error
// wraps durable.ErrLocked.
func lock(dir string) (func() error, error) {
	path := filepath.Join(dir, schema.ServeLockFile)
	l, err := durable.TryLock(path)
	if errors.Is(err, durable.ErrLocked) {
		holder := ""
		if pid := durable.HolderPID(path); pid != "" {
			holder = " (pid " + pid + ")"
		}
		return nil, fmt.Errorf("output.dir: %s is in use by another trajflow serve%s: %w", dir, holder, err)
	}
	if err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	// Only for the message of a second service: the lock holds without it.
	_ = l.WritePID()
	return func() error {
		if err := l.Unlock(); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		return nil
	}, nil
}
