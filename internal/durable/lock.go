package durable

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrLocked is wrapped by TryLock's error when another process holds the
// lock.
var ErrLocked = errors.New("held by another process")

// Lock is a held lock on a file (TryLock).
type Lock struct {
	f    *os.File
	path string
}

// WritePID replaces the lock file's content with this process's pid, for
// the message of the next process that finds it held (HolderPID).
func (l *Lock) WritePID() error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// HolderPID reads the pid a holder wrote into the lock file at path, or ""
// when there is none; it is only for messages.
func HolderPID(path string) string {
	b, _ := os.ReadFile(path) // only for a message: empty when unreadable
	return strings.TrimSpace(string(b))
}

// Unlock releases the lock and closes the file, returning both errors.
func (l *Lock) Unlock() error {
	err := unlock(l.f)
	if err != nil {
		err = fmt.Errorf("unlock: %w", err)
	}
	if cerr := l.f.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", l.path, err)
	}
	return nil
}
