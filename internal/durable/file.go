package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// SyncDir syncs a directory, so that a rename or a new name in it survives
// a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncDir(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncTree syncs dir's parent, dir and every directory under it: a
// process killed between a rename (a link, a mkdir) and its directory's
// sync left names that every reader sees and a power cut takes back. A
// run that builds on what such a run left (a resume trusting its parts)
// calls it first, so that nothing it commits depends on a name that is
// not durable. Files are not synced: trajflow's writers sync a file
// before its name appears (File.Commit), and an appended file is synced
// whole by its next writer's fsync. A directory that is not there (dir
// included) is skipped.
func SyncTree(dir string) error {
	dir = filepath.Clean(dir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing there yet: its maker syncs what it makes
	}
	if err := SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if err := SyncDir(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sync directory %s: %w", path, err)
		}
		return nil
	})
}

// WriteFile replaces path with data atomically: a reader sees the old
// content or the new one, and after it returns the new content survives a
// crash. A file that already exists keeps its mode; a new one gets perm
// (less the umask).
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Abort())
	}
	return f.Commit()
}

// File is a file written under a temporary name and put in place by
// Commit, or removed by Abort. Its methods Write, WriteAt, Seek and the
// rest are the temporary file's.
type File struct {
	*os.File
	final string
	perm  fs.FileMode
	// BeforeRename, when set, is called by Commit after the file is synced
	// and closed and before it is renamed: an error there aborts the
	// commit (the file is removed).
	BeforeRename func(final string) error
	done         bool
	size         int64 // bytes written through Write (or up to WriteAt's highest offset)
}

// Write is os.File's Write; a write refused for space returns a
// *SpaceError that says how many bytes the file needed.
func (f *File) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.size += int64(n)
	if err != nil {
		return n, needing(f.File.Name(), f.size+int64(len(p)-n), err)
	}
	return n, nil
}

// WriteAt is os.File's WriteAt; see Write.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.size = max(f.size, off+int64(n))
	if err != nil {
		return n, needing(f.File.Name(), off+int64(len(p)), err)
	}
	return n, nil
}

// WriteString is os.File's WriteString; see Write.
func (f *File) WriteString(s string) (int, error) { return f.Write([]byte(s)) }

// ReadFrom copies r into the file through Write (os.File's ReadFrom
// would bypass the count of its bytes).
func (f *File) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{f}, r)
}

// Create starts a file that Commit puts at path: the temporary file is
// ".BASE.tmp-RANDOM" in path's directory.
func Create(path string, perm fs.FileMode) (*File, error) {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(b[:]))
	return CreateAs(tmp, path, perm)
}

// CreateAs starts a file written at tmp, which must not exist, and that
// Commit renames to path. Writers whose leftovers are found by name after
// a crash choose tmp themselves.
func CreateAs(tmp, path string, perm fs.FileMode) (*File, error) {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return nil, err
	}
	return &File{File: f, final: path, perm: perm}, nil
}

// Final is the path Commit puts the file at.
func (f *File) Final() string { return f.final }

// Commit syncs and closes the temporary file, gives it the mode of the
// file it replaces (if any), renames it into place and syncs the
// directory. On an error before the rename the temporary file is removed;
// an error of the directory's sync leaves the file in place (only its
// durability is in doubt). Commit after Commit or Abort is an error.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("commit of %s: already done", f.final)
	}
	tmp := f.Name()
	fail := func(step string, err error) error {
		return errors.Join(named(step, tmp, err), f.Abort())
	}
	if err := Sync(f.File); err != nil {
		return fail("sync", needing(tmp, f.size, err))
	}
	if fi, err := os.Stat(f.final); err == nil && fi.Mode().Perm() != f.perm {
		if err := f.Chmod(fi.Mode().Perm()); err != nil {
			return fail("chmod", err)
		}
	}
	if err := f.File.Close(); err != nil {
		return errors.Join(named("close", tmp, err), f.remove())
	}
	if f.BeforeRename != nil {
		if err := f.BeforeRename(f.final); err != nil {
			return errors.Join(fmt.Errorf("commit of %s: %w", tmp, err), f.remove())
		}
	}
	if err := os.Rename(tmp, f.final); err != nil {
		return errors.Join(named("rename", tmp, err), f.remove())
	}
	f.done = true
	if err := SyncDir(filepath.Dir(f.final)); err != nil {
		return fmt.Errorf("sync directory of %s: %w", f.final, err)
	}
	return nil
}

// named is err of step on path, said once: an os error names the
// operation and the path already.
func named(step, path string, err error) error {
	if strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("%s %s: %w", step, path, err)
}

// CommitAs is Commit to path instead of the path the file was created
// for: for a writer that learns the name of what it wrote only once it is
// finished (a companion file named after another).
func (f *File) CommitAs(path string) error {
	if !f.done {
		f.final = path
	}
	return f.Commit()
}

// Abort closes and removes the temporary file; the file at the final path
// is untouched. Abort after Commit or Abort does nothing.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	err := f.File.Close()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return errors.Join(err, f.remove())
}

// remove removes the temporary file once; a file already gone is no
// failure.
func (f *File) remove() error {
	f.done = true
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CommitNew is Commit for a file that must never replace another: the
// synced file is linked to its path (not renamed over it), the directory
// synced, and the temporary name removed. When a file is already at the
// path the error wraps fs.ErrExist, and that file is untouched (for
// writers that may race: the first one's file stays, the others read it).
// The file keeps the mode it was created with.
func (f *File) CommitNew() error {
	if f.done {
		return fmt.Errorf("commit of %s: already done", f.final)
	}
	tmp := f.Name()
	if err := Sync(f.File); err != nil {
		return errors.Join(named("sync", tmp, err), f.Abort())
	}
	if err := f.File.Close(); err != nil {
		return errors.Join(named("close", tmp, err), f.remove())
	}
	if err := os.Link(tmp, f.final); err != nil {
		return errors.Join(fmt.Errorf("link %s: %w", f.final, err), f.remove())
	}
	// Linked, the file stays at its path; the temporary name goes.
	if err := f.remove(); err != nil {
		return fmt.Errorf("remove %s: %w", tmp, err)
	}
	if err := SyncDir(filepath.Dir(f.final)); err != nil {
		return fmt.Errorf("sync directory of %s: %w", f.final, err)
	}
	return nil
}

// MkdirAll is os.MkdirAll whose new directories survive a power loss:
// the parent of each directory it creates is synced once the directory
// is made.
func MkdirAll(path string, perm fs.FileMode) error {
	path = filepath.Clean(path)
	var missing []string // deepest first
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := SyncDir(filepath.Dir(missing[i])); err != nil {
			return fmt.Errorf("sync directory of %s: %w", missing[i], err)
		}
	}
	return nil
}

// OpenAppend opens the file at path for appending, creating it with perm
// if needed; a file it creates has its directory synced, so that its
// name survives a power loss. What is appended is durable once the
// caller syncs the file (os.File.Sync).
func OpenAppend(path string, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	if f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, perm); err != nil {
		return nil, err
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return nil, errors.Join(fmt.Errorf("sync directory of %s: %w", path, err), f.Close())
	}
	return f, nil
}
