// Package durable is the floor every writer of trajflow stands on: a file
// replaced atomically (written under a temporary name in its directory,
// synced, renamed into place, the directory synced), with the replaced
// file's mode kept, and the kernel's lock on a file (flock), which goes
// with the process even on kill -9. CommitNew puts a file in place only
// where none is (a link, for writers that race), MkdirAll makes
// directories whose names survive a power loss, and OpenAppend opens a
// log whose new name does.
//
// A power cut keeps only what was made durable: a file's data once the
// file is synced, a name once its directory is synced. Every function
// here syncs both before it returns; crashfs's tests
// (powercut_test.go) check each after a simulated cut.
//
// A crash leaves either the old content or the new one, never a part; a
// temporary file it leaves behind starts with "." and is never read as
// output.
package durable
