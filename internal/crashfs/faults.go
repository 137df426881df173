package crashfs

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

// Op is an operation a Fault can make fail.
type Op int

const (
	// Write is a write to a file.
	Write Op = iota + 1
	// Fsync is an fsync (or fdatasync) of a file or a directory.
	Fsync
	// Rename is a rename.
	Rename
)

func (o Op) String() string {
	switch o {
	case Write:
		return "write"
	case Fsync:
		return "fsync"
	case Rename:
		return "rename"
	}
	return "op?"
}

// Fault makes operations of the file system fail, as a failing disk
// would: a matching operation fails with Err and changes nothing (no byte
// written, nothing made durable, no name moved).
type Fault struct {
	Op  Op
	Err syscall.Errno // syscall.EIO, syscall.ENOSPC…
	// Match, when set, is a filepath.Match pattern on the base name of
	// the file or directory operated on (a rename's source); empty
	// matches every name. The root's name is ".".
	Match string
	// Skip lets the first Skip matching operations through.
	Skip int
	// Count is how many matching operations fail after those; 0: every
	// one until ClearFaults.
	Count int
}

// faults is the injected state, apart from mu so that a write does not
// wait for a sync's snapshot.
type faults struct {
	mu     sync.Mutex
	list   []*Fault
	free   int64 // bytes writes may still add; < 0: unlimited
	failed map[fs.FileHandle]bool
	// counts for Stats
	injected, nospace, retried int
	written                    int64
}

// Inject adds a fault; it holds until its Count is spent or ClearFaults.
func (f *FS) Inject(ft Fault) {
	f.faults.mu.Lock()
	defer f.faults.mu.Unlock()
	f.faults.list = append(f.faults.list, &ft)
}

// SetFree makes the disk full after n more bytes: a write that would
// take the bytes written past n fails with ENOSPC (whole: nothing of it
// is written), as does every later one. Every byte written counts
// (overwrites too) and nothing frees space but SetFree; n < 0 lifts the
// limit (the space freed).
func (f *FS) SetFree(n int64) {
	f.faults.mu.Lock()
	defer f.faults.mu.Unlock()
	f.faults.free = n
}

// ClearFaults removes every fault and the limit of SetFree.
func (f *FS) ClearFaults() {
	f.faults.mu.Lock()
	defer f.faults.mu.Unlock()
	f.faults.list = nil
	f.faults.free = -1
}

// fail says whether an operation op on name fails, and with what.
func (fl *faults) fail(op Op, name string) syscall.Errno {
	for i, ft := range fl.list {
		if ft.Op != op {
			continue
		}
		if ft.Match != "" {
			if ok, _ := filepath.Match(ft.Match, name); !ok {
				continue
			}
		}
		if ft.Skip > 0 {
			ft.Skip--
			continue
		}
		if ft.Count > 0 {
			if ft.Count--; ft.Count == 0 {
				fl.list = append(fl.list[:i:i], fl.list[i+1:]...)
			}
		}
		fl.injected++
		return ft.Err
	}
	return 0
}

// name is the node's base name ("" for the root).
func (n *node) name() string {
	return filepath.Base(n.EmbeddedInode().Path(nil))
}

var _ fs.NodeWritever = (*node)(nil)

// Writev writes through the file handle unless a fault or a full disk
// fails it.
func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	var size int64
	for _, d := range data {
		size += int64(len(d))
	}
	fl := &n.fs.faults
	fl.mu.Lock()
	errno := fl.fail(Write, n.name())
	if errno == 0 && fl.free >= 0 {
		if size > fl.free {
			fl.nospace++
			errno = syscall.ENOSPC
		} else {
			fl.free -= size
		}
	}
	if errno == 0 {
		fl.written += size
	}
	fl.mu.Unlock()
	if errno != 0 {
		return 0, errno
	}
	if w, ok := f.(fs.FileWritever); ok {
		return w.Writev(ctx, data, off)
	}
	w, ok := f.(fs.FileWriter)
	if !ok {
		return 0, syscall.ENOTSUP
	}
	var written uint32
	for _, d := range data {
		m, errno := w.Write(ctx, d, off)
		written += m
		off += int64(m)
		if errno != 0 || int(m) < len(d) {
			return written, errno
		}
	}
	return written, 0
}

// syncFault says whether an fsync through handle h fails. A failed fsync
// drops nothing already durable and makes nothing durable; an fsync
// retried through the same handle after one failed reports success and
// makes nothing durable either (ok false), as Linux does: the kernel has
// marked the pages it could not write clean and reports the error once
// (PostgreSQL's "fsyncgate").
func (n *node) syncFault(h fs.FileHandle) (errno syscall.Errno, ok bool) {
	fl := &n.fs.faults
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if h != nil && fl.failed[h] {
		fl.retried++
		return 0, false
	}
	if errno = fl.fail(Fsync, n.name()); errno != 0 {
		if h != nil {
			if fl.failed == nil {
				fl.failed = map[fs.FileHandle]bool{}
			}
			fl.failed[h] = true
		}
		return errno, false
	}
	return 0, true
}

// renameFault says whether a rename of name fails.
func (n *node) renameFault(name string) syscall.Errno {
	fl := &n.fs.faults
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.fail(Rename, name)
}

// file is the loopback's open file without FUSE passthrough: the kernel
// would otherwise write to the backing file itself, past Writev and its
// faults.
type file struct {
	*fs.LoopbackFile
}

// PassthroughFd declines passthrough.
func (*file) PassthroughFd() (int, bool) { return 0, false }

// wrapFile hides the passthrough of a loopback file handle.
func wrapFile(h fs.FileHandle) fs.FileHandle {
	if lf, ok := h.(*fs.LoopbackFile); ok {
		return &file{LoopbackFile: lf}
	}
	return h
}

var _ fs.NodeOpener = (*node)(nil)

// Open opens the file with a handle of wrapFile.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return wrapFile(h), fl, errno
}
