package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// image is the durable state: what a power cut leaves. Inodes are named
// by their number in the backing directory, which no inode reuses while
// the file system is mounted (a removed inode is kept in the graveyard).
type image struct {
	root uint64
	// dirs holds each directory's entries as of its last fsync; a
	// directory never synced has none.
	dirs map[uint64][]dirent
	// files holds the mode of each file synced; its content is
	// store/INO. A file never synced is empty.
	files map[uint64]uint32
}

// dirent is a directory entry as made durable.
type dirent struct {
	name   string
	ino    uint64
	mode   uint32 // st_mode: the type and the permissions
	target string // a symbolic link's target
}

// snapshotAll makes an image in which everything under root is durable,
// its files' content copied into store.
func snapshotAll(root, store string) (*image, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return nil, err
	}
	img := &image{root: st.Ino, dirs: map[uint64][]dirent{}, files: map[uint64]uint32{}}
	var walk func(dir string, ino uint64) error
	walk = func(dir string, ino uint64) error {
		ents, err := readDir(dir)
		if err != nil {
			return err
		}
		img.dirs[ino] = ents
		for _, e := range ents {
			p := filepath.Join(dir, e.name)
			switch e.mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				if err := walk(p, e.ino); err != nil {
					return err
				}
			case syscall.S_IFREG:
				if err := img.syncFile(p, e.ino, store); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return img, walk(root, st.Ino)
}

// readDir lists dir's entries with their inodes, by name.
func readDir(dir string) ([]dirent, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	ents := make([]dirent, 0, len(names))
	for _, name := range names {
		p := filepath.Join(dir, name)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return nil, err
		}
		e := dirent{name: name, ino: st.Ino, mode: st.Mode}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			if e.target, err = os.Readlink(p); err != nil {
				return nil, err
			}
		}
		ents = append(ents, e)
	}
	return ents, nil
}

func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	sort.Strings(names)
	return names, err
}

// syncDir makes the entries of the directory at path (inode ino) durable.
func (img *image) syncDir(path string, ino uint64) error {
	ents, err := readDir(path)
	if err != nil {
		return err
	}
	img.dirs[ino] = ents
	return nil
}

// syncFile makes the content and mode of the file at path (inode ino)
// durable: a copy in store.
func (img *image) syncFile(path string, ino uint64, store string) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }() // best effort: read only
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Ino != ino {
		return fmt.Errorf("%s is no longer inode %d", path, ino)
	}
	name := filepath.Join(store, strconv.FormatUint(ino, 10))
	tmp := name + "-copying"
	dst, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return err
	}
	img.files[ino] = uint32(st.Mode().Perm())
	return nil
}

// materialize writes the durable image as a directory tree at dst: the
// disk after the power comes back.
func (img *image) materialize(dst, store string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	placed := map[uint64]string{} // inode → its first path in dst
	var walk func(ino uint64, dir string) error
	walk = func(ino uint64, dir string) error {
		for _, e := range img.dirs[ino] {
			p := filepath.Join(dir, e.name)
			perm := fs.FileMode(e.mode & 0o7777)
			switch e.mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				if _, ok := placed[e.ino]; ok {
					continue // a directory reached twice: once only
				}
				placed[e.ino] = p
				if err := os.Mkdir(p, perm); err != nil {
					return err
				}
				if err := walk(e.ino, p); err != nil {
					return err
				}
			case syscall.S_IFLNK:
				if err := os.Symlink(e.target, p); err != nil {
					return err
				}
			case syscall.S_IFREG:
				if first, ok := placed[e.ino]; ok {
					if err := os.Link(first, p); err != nil {
						return err
					}
					continue
				}
				placed[e.ino] = p
				if err := img.writeFile(p, e.ino, perm, store); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(img.root, dst)
}

// writeFile writes the durable content of inode ino at p: its last
// fsync's, or nothing.
func (img *image) writeFile(p string, ino uint64, perm fs.FileMode, store string) error {
	if m, ok := img.files[ino]; ok {
		perm = fs.FileMode(m)
	}
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, ok := img.files[ino]; ok {
		src, err := os.Open(filepath.Join(store, strconv.FormatUint(ino, 10)))
		if err != nil {
			return errors.Join(err, dst.Close())
		}
		_, err = io.Copy(dst, src)
		_ = src.Close() // best effort: read only
		if err != nil {
			return errors.Join(err, dst.Close())
		}
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Chmod(p, perm) // the umask aside
}
