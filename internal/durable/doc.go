// Package durable is the floor every writer of trajflow stands on: a file
// replaced atomically (written under a temporary name in its directory,
// synced, renamed into place, the directory synced), with the replaced
// file's mode kept, and the kernel's lock on a file (flock), which goes
// with the process even on kill -9.
//
// A crash leaves either the old content or the new one, never a part; a
// temporary file it leaves behind starts with "." and is never read as
// output.
package durable
