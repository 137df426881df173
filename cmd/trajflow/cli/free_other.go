//go:build !unix

package cli

// freeBytes cannot tell the free space here.
func freeBytes(string) (uint64, bool) { return 0, false }
