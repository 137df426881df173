//go:build unix

package cli

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged process may still use on the
// file system of dir; ok false when it cannot be told.
func freeBytes(dir string) (n uint64, ok bool) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
