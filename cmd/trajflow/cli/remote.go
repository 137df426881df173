package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// fetched is what the stats, merge and report commands downloaded of
// their s3:// arguments: a temporary directory, and the local copy of
// each URL so that messages name the URL again.
type fetched struct {
	tmp   string
	store *storage.Store
	// local maps each local copy to the URL it stands for.
	local map[string]string
}

func (f *fetched) close() {
	if f.tmp != "" {
		_ = os.RemoveAll(f.tmp) // best effort: a temporary directory, not output
	}
}

// namedWriter writes to w with the local copies' paths named as their
// URLs again.
type namedWriter struct {
	w io.Writer
	f *fetched
}

func (n *namedWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(n.w, n.f.names(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// names rewrites the local copies' paths in s back to their URLs.
func (f *fetched) names(s string) string {
	for l, u := range f.local {
		s = strings.ReplaceAll(s, l, u)
	}
	return s
}

func (f *fetched) open() error {
	if f.store != nil {
		return nil
	}
	s, err := storage.Open(storage.FromEnv())
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "trajflow-fetch-")
	if err != nil {
		return err
	}
	f.store, f.tmp, f.local = s, tmp, map[string]string{}
	return nil
}

// localPaths returns paths with each s3:// URL replaced by a local copy:
// an object by itself, a prefix by the Parquet and JSON files under it,
// recursively (the shards of a sharded run included), in their layout.
func (f *fetched) localPaths(ctx context.Context, paths []string) ([]string, error) {
	var out []string
	for i, p := range paths {
		if !storage.IsURL(p) {
			out = append(out, p)
			continue
		}
		u, err := storage.ParseURL(p)
		if err != nil {
			return nil, err
		}
		if err := f.open(); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if err := f.store.Check(ctx, u.Bucket); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		dir := filepath.Join(f.tmp, fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if strings.HasSuffix(u.Key, ".parquet") {
			local, err := f.store.Download(ctx, u, dir)
			if err != nil {
				return nil, err
			}
			out, f.local[local] = append(out, local), u.String()
			continue
		}
		m := &storage.Mirror{Store: f.store, URL: u, Local: dir, Skip: notData}
		n, err := m.Pull(ctx)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: no objects under this prefix", p)
		}
		f.local[dir] = u.String()
		out = append(out, dir)
	}
	return out, nil
}

// upload uploads the local file or directory tree to the URL dest.
func (f *fetched) upload(ctx context.Context, local, dest string) error {
	u, err := storage.ParseURL(dest)
	if err != nil {
		return err
	}
	if err := f.open(); err != nil {
		return err
	}
	st, err := os.Stat(local)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return f.store.Put(ctx, u.Bucket, u.Key, local)
	}
	_, err = (&storage.Mirror{Store: f.store, URL: u, Local: local, Last: schema.DataDir}).Push(ctx)
	return err
}

// storeCode is the exit code of an object storage error: 4 when no retry
// mends it (credentials, bucket, endpoint), else 1.
func storeCode(err error) int {
	if errors.Is(err, storage.ErrAccess) {
		return ExitErrors
	}
	return ExitFailed
}

// pullOut returns a local directory standing for the URL u, holding the
// Parquet and JSON files already under it (none when the prefix is new).
func (f *fetched) pullOut(ctx context.Context, u string) (string, error) {
	pu, err := storage.ParseURL(u)
	if err != nil {
		return "", err
	}
	if err := f.open(); err != nil {
		return "", err
	}
	if err := f.store.Check(ctx, pu.Bucket); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(f.tmp, "out-")
	if err != nil {
		return "", err
	}
	f.local[dir] = u
	if _, err := (&storage.Mirror{Store: f.store, URL: pu, Local: dir, Skip: notData}).Pull(ctx); err != nil {
		return "", err
	}
	return dir, nil
}

// notData keeps all but Parquet files, JSON files and stored images out
// of a download.
func notData(rel string) bool {
	ext := path.Ext(rel)
	return ext != ".parquet" && ext != ".json" && path.Base(path.Dir(rel)) != schema.ImagesDir
}
