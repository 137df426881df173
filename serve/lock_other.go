//go:build !unix

package serve

// lock is a no-op where flock is not available.
func lock(dir string) (func() error, error) { return func() error { return nil }, nil }
