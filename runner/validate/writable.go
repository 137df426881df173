package validate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// writable reports whether the output directory dir, or the nearest
// directory above it that exists (where a run would create it), can be
// written, without writing anything: a read-only file system or a
// directory the user cannot write is an error; a path through a file is
// one too.
func writable(dir string) error {
	p := filepath.Clean(dir)
	for {
		st, err := os.Stat(p)
		switch {
		case err == nil && !st.IsDir():
			return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("not a directory")}
		case err == nil:
			return canWrite(p)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return err
		}
		p = parent
	}
}
