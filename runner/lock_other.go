//go:build !unix

package runner

import "github.com/trajflow/trajflow/schema"

// LockFile is held by a running run in its output directory.
const LockFile = schema.LockFile

// lockDir is a no-op where flock is not available.
func lockDir(dir string) (func() error, error) { return func() error { return nil }, nil }
