//go:build !unix

package runner

// LockFile is held by a running run in its output directory.
const LockFile = ".trajflow.lock"

// lockDir is a no-op where flock is not available.
func lockDir(dir string) (func() error, error) { return func() error { return nil }, nil }
