package crashfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is go-fuse's loopback node with the harness's bookkeeping: fsync
// takes a snapshot into the durable image, and a removed inode goes to
// the graveyard (so that its number is not reused while the image may
// still name it).
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
)

// WrapChild makes every node of the file system a node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// backing is the node's path in the backing directory, or in the
// graveyard once it has no name.
func (n *node) backing() string {
	ino := n.StableAttr().Ino
	in := n.EmbeddedInode()
	if in == in.Root() {
		return n.fs.live()
	}
	if _, parent := in.Parent(); parent != nil {
		p := filepath.Join(n.fs.live(), in.Path(nil))
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil && st.Ino == ino {
			return p
		}
	}
	return filepath.Join(n.fs.grave(), strconv.FormatUint(ino, 10))
}

// Fsync makes the file's content, or the directory's entries, durable.
// The backing file itself is not synced: the harness models the disk.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if errno, ok := n.syncFault(f); !ok {
		return errno
	}
	return n.syncLocked()
}

func (n *node) syncLocked() syscall.Errno {
	p, ino := n.backing(), n.StableAttr().Ino
	var err error
	if n.IsDir() {
		n.fs.stats.DirSyncs++
		err = n.fs.img.syncDir(p, ino)
	} else {
		n.fs.stats.FileSyncs++
		err = n.fs.img.syncFile(p, ino, n.fs.store())
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	return 0
}

// OpendirHandle wraps the loopback's directory handle, so that an fsync
// of the directory reaches Fsync.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{inner: fh, n: n}, fl, 0
}

// dirHandle is an open directory.
type dirHandle struct {
	inner fs.FileHandle
	n     *node
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if r, ok := d.inner.(fs.FileReaddirenter); ok {
		return r.Readdirent(ctx)
	}
	return nil, syscall.ENOTSUP
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.inner.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, d, flags)
}

// bury keeps the inode at path alive in the graveyard before its last
// name may go: hard-linked there (a file, a symbolic link) or, for an
// empty directory, moved there.
func (n *node) bury(path string) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fs.ToErrno(err)
	}
	grave := filepath.Join(n.fs.grave(), strconv.FormatUint(st.Ino, 10))
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		names, err := readNames(path)
		if err != nil {
			return fs.ToErrno(err)
		}
		if len(names) > 0 {
			return syscall.ENOTEMPTY
		}
		return fs.ToErrno(os.Rename(path, grave))
	}
	if err := os.Link(path, grave); err != nil && !errors.Is(err, os.ErrExist) {
		return fs.ToErrno(err)
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	p := filepath.Join(n.backing(), name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	if errno := n.bury(p); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	p := filepath.Join(n.backing(), name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	return n.bury(p) // moved to the graveyard: gone from here
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if errno := n.renameFault(name); errno != 0 {
		return errno
	}
	if flags&(unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE) == 0 {
		// A replaced target loses a name: keep its inode.
		src, dst := filepath.Join(n.backing(), name), filepath.Join(np.backing(), newName)
		var ss, ds syscall.Stat_t
		if err := syscall.Lstat(src, &ss); err != nil {
			return fs.ToErrno(err)
		}
		if err := syscall.Lstat(dst, &ds); err == nil && ds.Ino != ss.Ino {
			srcDir := ss.Mode&syscall.S_IFMT == syscall.S_IFDIR
			dstDir := ds.Mode&syscall.S_IFMT == syscall.S_IFDIR
			switch {
			case dstDir && !srcDir:
				return syscall.EISDIR
			case srcDir && !dstDir:
				return syscall.ENOTDIR
			}
			if errno := n.bury(dst); errno != 0 {
				return errno
			}
		}
	}
	return n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags)
}

// The operations below only add a name; they are ordered with the
// snapshots of a directory's fsync.

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	in, h, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, wrapFile(h), fl, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	return n.LoopbackNode.Link(ctx, t.LoopbackNode, name, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}
