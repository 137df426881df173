package crashfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable is wrapped by Mount's error when this machine cannot
// mount a FUSE file system (no /dev/fuse, no right to mount).
var ErrUnavailable = errors.New("crashfs: FUSE is not available here")

// FS is a mounted crash-consistency file system. Its methods are safe for
// concurrent use.
type FS struct {
	dir string // the harness's own directory: mnt, live, store, grave
	// mu orders the namespace's changes and the syncs that take snapshots
	// of them, and Cut against both.
	mu     sync.Mutex
	server *fuse.Server
	img    *image
	cuts   int
	stats  Stats
	faults faults // Inject, SetFree (faults.go)
}

// Stats counts what the file system was asked to make durable.
type Stats struct {
	// FileSyncs and DirSyncs count fsync calls on files and on
	// directories since Mount.
	FileSyncs, DirSyncs int
	// Cuts counts the power cuts.
	Cuts int
	// Injected counts the operations failed by an injected Fault,
	// NoSpace the writes failed by SetFree's full disk.
	Injected, NoSpace int
	// RetriedSyncs counts the fsyncs retried through a handle whose
	// fsync had failed (reported successful, made nothing durable).
	RetriedSyncs int
	// Written counts the bytes written to files since Mount (what
	// SetFree counts).
	Written int64
}

// Mount makes the harness's directories under dir (which must exist,
// on a local file system) and mounts the file system at Root(), empty.
func Mount(dir string) (*FS, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: /dev/fuse: %v", ErrUnavailable, err)
	}
	f := &FS{dir: dir}
	f.faults.free = -1
	for _, d := range []string{f.mnt(), f.live(), f.store(), f.grave()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("crashfs: %w", err)
		}
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Root is the mount point: the files of the modelled disk.
func (f *FS) Root() string { return f.mnt() }

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.stats
	f.faults.mu.Lock()
	defer f.faults.mu.Unlock()
	st.Injected, st.NoSpace, st.RetriedSyncs = f.faults.injected, f.faults.nospace, f.faults.retried
	st.Written = f.faults.written
	return st
}

func (f *FS) mnt() string   { return filepath.Join(f.dir, "mnt") }
func (f *FS) live() string  { return filepath.Join(f.dir, "live") }
func (f *FS) store() string { return filepath.Join(f.dir, "store") }
func (f *FS) grave() string { return filepath.Join(f.dir, "grave") }

// mount takes the whole backing directory as durable (a fresh disk, or
// one just powered on) and mounts it.
func (f *FS) mount() error {
	img, err := snapshotAll(f.live(), f.store())
	if err != nil {
		return fmt.Errorf("crashfs: %w", err)
	}
	f.img = img
	var st syscall.Stat_t
	if err := syscall.Stat(f.live(), &st); err != nil {
		return fmt.Errorf("crashfs: %w", err)
	}
	lroot := &fs.LoopbackRoot{Path: f.live(), Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: lroot}, fs: f}
	lroot.RootNode = root
	second := time.Second
	opts := &fs.Options{
		EntryTimeout:    &second,
		AttrTimeout:     &second,
		NegativeTimeout: &second,
		RootStableAttr:  &fs.StableAttr{Ino: st.Ino},
		MountOptions: fuse.MountOptions{
			DirectMount: true, // as root, mount(2) itself: no fusermount needed
			FsName:      "crashfs",
			Name:        "crashfs",
		},
	}
	server, err := fs.Mount(f.mnt(), root, opts)
	if err != nil {
		return fmt.Errorf("%w: mount %s: %v", ErrUnavailable, f.mnt(), err)
	}
	f.server = server
	return nil
}

// unmount unmounts, retrying while the mount is busy (a process that
// was killed may still be closing its files).
func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	var err error
	for range 100 {
		if err = f.server.Unmount(); err == nil {
			f.server.Wait()
			f.server = nil
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("crashfs: unmount %s: %w", f.mnt(), err)
}

// Cut is a power cut: it unmounts the file system, keeps only the
// durable image (package doc) and mounts that at Root() again. The
// processes that used the mount must have ended; nothing may hold a
// file of it open.
func (f *FS) Cut() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.unmount(); err != nil {
		return err
	}
	f.cuts++
	f.stats.Cuts++
	f.faults.mu.Lock()
	f.faults.failed = nil // the handles died with the power
	f.faults.mu.Unlock()
	next := filepath.Join(f.dir, fmt.Sprintf("survived-%d", f.cuts))
	if err := f.img.materialize(next, f.store()); err != nil {
		return fmt.Errorf("crashfs: cut: %w", err)
	}
	for _, d := range []string{f.live(), f.store(), f.grave()} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
	}
	if err := os.Rename(next, f.live()); err != nil {
		return fmt.Errorf("crashfs: cut: %w", err)
	}
	for _, d := range []string{f.store(), f.grave()} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("crashfs: cut: %w", err)
		}
	}
	return f.mount()
}

// Close unmounts the file system; its files stay in the backing
// directory under dir.
func (f *FS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unmount()
}
