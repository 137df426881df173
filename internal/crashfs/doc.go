// Package crashfs is a crash-consistency harness: a FUSE file system
// (github.com/hanwen/go-fuse/v2) over a backing directory that models a
// disk with a volatile cache, so that a test can cut the power on
// purpose and look at what a real disk could have kept.
//
// Every operation reaches the backing directory at once, so the process
// on the mount sees an ordinary file system (as the kernel's page cache
// shows it). Beside it crashfs keeps the durable image, the state a power
// cut leaves, and changes it only where POSIX makes something durable:
//
//   - fsync (or fdatasync) of a file makes its content, size and mode
//     durable, as the file is at that moment;
//   - fsync of a directory makes its entries durable, as they are at that
//     moment: the names created, renamed, linked or removed in it (files,
//     directories, symbolic links), each naming its inode.
//
// Cut, the power cut, unmounts the file system, replaces the backing
// directory with the durable image and mounts it again: a file whose
// directory was never synced is gone, a rename or an unlink whose
// directory was not synced is undone, a file whose name is durable but
// whose data was never synced is empty, and a file holds its content as of
// its last fsync.
//
// What it models and what it does not:
//
//   - It loses everything a disk may lose (the worst case, every time): a
//     real disk often keeps more (ext4 commits a new file's name with its
//     first fsync; writes reach the disk on their own after some
//     seconds). A program that passes here does not rely on that luck.
//   - Inodes are identities: a name made durable names the inode, and the
//     inode's content is its last fsync's, even when that fsync came
//     through another name or after the name was removed. A durable
//     image can thus hold one file under two names (a file renamed from
//     one directory into another, only the second synced, is there
//     under both names, as two links); a directory reached twice that
//     way appears once.
//   - There is no order inside one fsync and no tearing: an fsync's
//     content is taken whole, as if the disk wrote it atomically, and a
//     file's unsynced writes are lost whole (a real disk may keep some
//     blocks of them, or write a page partly).
//   - Metadata other than the mode (times, owners, extended attributes)
//     and special files (FIFOs, devices) are not modelled; locks (flock)
//     are the kernel's and vanish with the mount, as with a reboot.
//   - Faults are injected, not modelled from a device: Inject makes a
//     write, an fsync or a rename fail (EIO, ENOSPC…) by name, SetFree
//     fills the disk after a number of bytes written, both switchable at
//     run time. A failed operation changes nothing; an fsync retried on
//     the handle whose fsync failed reports success and makes nothing
//     durable, as Linux does (Stats counts those retries).
//
// Mounting needs /dev/fuse and the right to mount: as root crashfs calls
// mount(2) itself (go-fuse's DirectMount), else fusermount. Mount's error
// wraps ErrUnavailable where neither works; crashfstest.Mount turns that
// into a skip, or a failure under CI=true.
package crashfs
