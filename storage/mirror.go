package storage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Mirror keeps a local directory and a prefix of a bucket in step: Pull
// copies what the prefix holds into the directory, Push uploads the files
// of the directory that changed since they were last pulled or pushed.
// Temporary files (".*.tmp") and the names Skip matches stay local.
type Mirror struct {
	Store *Store
	URL   URL
	Local string
	// Skip, when set, keeps the files whose path (relative, with
	// slashes) it matches out of Push and Pull.
	Skip func(rel string) bool
	// Last, when set, is the relative directory (with slashes, no
	// trailing slash) whose Parquet files Push uploads after every other
	// file: an output directory's data directory (schema.DataDir).
	Last string
	seen map[string]stamp
}

type stamp struct {
	size int64
	mod  time.Time
}

// Pull downloads every object under the mirror's prefix, recursively,
// into Local, keeping their relative paths, and returns how many it
// downloaded.
func (m *Mirror) Pull(ctx context.Context) (int, error) {
	objs, err := m.Store.List(ctx, m.URL.Bucket, m.URL.Prefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, m.URL.Prefix())
		if !localName(rel) || m.skip(rel) {
			continue
		}
		dst := filepath.Join(m.Local, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return n, err
		}
		if err := m.Store.Get(ctx, m.URL.Bucket, o.Key, dst); err != nil {
			return n, fmt.Errorf("%s: %w", m.URL.Join(rel), err)
		}
		m.mark(rel, dst)
		n++
	}
	return n, nil
}

// localName reports whether an object's relative key maps to a file
// under the local directory.
func localName(rel string) bool {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return false
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return filepath.IsLocal(filepath.FromSlash(rel))
}

func (m *Mirror) skip(rel string) bool {
	base := path.Base(rel)
	if strings.HasPrefix(base, ".") && (strings.HasSuffix(base, ".tmp") || strings.Contains(base, ".tmp-")) {
		return true // a file being written (".part-00001.parquet.tmp", ".tmp-image-…", ".shard.json.tmp-…")
	}
	return m.Skip != nil && m.Skip(rel)
}

func (m *Mirror) mark(rel, local string) {
	if m.seen == nil {
		m.seen = map[string]stamp{}
	}
	if st, err := os.Stat(local); err == nil {
		m.seen[rel] = stamp{st.Size(), st.ModTime()}
	}
}

// Push uploads the files under Local that are new or changed (size or
// modification time) since the last Pull or Push: the others first, then
// the Parquet files in name order, those under Last last, so that
// what a data file's rows refer to (inputs.jsonl, images, its steps file)
// is in the bucket before the file is.
func (m *Mirror) Push(ctx context.Context) (int, error) {
	var side, parts []string
	err := filepath.WalkDir(m.Local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(m.Local, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if m.skip(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if s, ok := m.seen[rel]; ok && s.size == info.Size() && s.mod.Equal(info.ModTime()) {
			return nil
		}
		if strings.HasSuffix(rel, ".parquet") {
			parts = append(parts, rel)
		} else {
			side = append(side, rel)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Strings(side)
	// The data directory's part files go last: a data file's commit
	// stands for its companions (a steps file of the same name), which
	// must be in the bucket before it.
	sort.Slice(parts, func(i, j int) bool {
		di, dj := m.under(parts[i]), m.under(parts[j])
		if di != dj {
			return dj
		}
		return parts[i] < parts[j]
	})
	n := 0
	for _, rel := range append(side, parts...) {
		local := filepath.Join(m.Local, filepath.FromSlash(rel))
		if err := m.Store.Put(ctx, m.URL.Bucket, m.URL.Join(rel).Key, local); err != nil {
			return n, fmt.Errorf("upload %s: %w", m.URL.Join(rel), err)
		}
		m.mark(rel, local)
		n++
	}
	return n, nil
}

// Download copies one object into a new local file under dir named as
// the object's base name, and returns its path.
func (s *Store) Download(ctx context.Context, u URL, dir string) (string, error) {
	dst := filepath.Join(dir, path.Base(u.Key))
	if err := s.Get(ctx, u.Bucket, u.Key, dst); err != nil {
		return "", fmt.Errorf("%s: %w", u, err)
	}
	return dst, nil
}

// under reports whether rel lies in the directory Last.
func (m *Mirror) under(rel string) bool {
	return m.Last != "" && strings.HasPrefix(rel, m.Last+"/")
}
