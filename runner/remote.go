package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// ErrStorage is returned when object storage refuses the run: bad or
// missing credentials, a missing bucket, a bad endpoint. The command
// exits 4, as for endpoints that cannot serve the run.
var ErrStorage = errors.New("the object storage cannot serve the run")

// remote is the run's object storage side: output.dir and source.path
// given as s3:// URLs. The run works in a local staging directory that
// mirrors output.dir: what earlier runs committed is downloaded before the
// resume reads it, each file is uploaded when it commits (the side files
// first, then the part file), and the staging directory is removed at
// the end.
type remote struct {
	// url is output.dir as given; nil when the output is local.
	url     *storage.URL
	mirror  *storage.Mirror
	lock    *storage.Lock
	staging string
}

// storeError wraps an object storage error for the command: an error no
// retry mends exits 4 naming the config key.
func storeError(key, where string, err error) error {
	if errors.Is(err, storage.ErrAccess) || errors.Is(err, storage.ErrLocked) {
		if errors.Is(err, storage.ErrLocked) {
			return fmt.Errorf("%s %s is %w", key, where, err)
		}
		return fmt.Errorf("%w: %s %s: %w", ErrStorage, key, where, err)
	}
	return fmt.Errorf("%s %s: %w", key, where, err)
}

// openStore opens the store the AWS_* environment variables name.
func openStore(key, where string) (*storage.Store, error) {
	s, err := storage.Open(storage.FromEnv())
	if err != nil {
		return nil, storeError(key, where, err)
	}
	return s, nil
}

// provisionRemote prepares an s3:// output.dir: it checks the bucket,
// takes the prefix's lock, aborts the multipart uploads a crashed run
// left, downloads what is committed into a staging directory, and points
// output.dir at it for the rest of the run.
func (r *run) provisionRemote(ctx context.Context) error {
	where := r.cfg.Output.Dir
	u, err := storage.ParseURL(where)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	s, err := openStore("output.dir", where)
	if err != nil {
		return err
	}
	if err := s.Check(ctx, u.Bucket); err != nil {
		return storeError("output.dir", where, err)
	}
	lock, err := s.TakeLock(ctx, u.Bucket, u.Join(schema.LockFile).Key, func(err error) {
		r.fail(fmt.Errorf("output.dir %s: %w", where, err))
	})
	if err != nil {
		return storeError("output.dir", where, err)
	}
	r.remote.url, r.remote.lock = &u, lock
	r.closeChecked(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lock.Release(ctx); err != nil {
			return fmt.Errorf("output.dir %s: release the lock: %w", where, err)
		}
		return nil
	})
	if err := s.AbortIncomplete(ctx, u.Bucket, u.Prefix()); err != nil {
		return storeError("output.dir", where, err)
	}
	staging, err := os.MkdirTemp("", "trajflow-staging-")
	if err != nil {
		return fmt.Errorf("output.dir: staging directory: %w", err)
	}
	r.remote.staging = staging
	r.closers.add(func() { _ = os.RemoveAll(staging) }) // best effort: a temporary directory, not output
	out := filepath.Join(staging, "output")
	r.remote.mirror = &storage.Mirror{Store: s, URL: u, Local: out, Last: schema.DataDir, Skip: func(rel string) bool {
		// The lock lives in the bucket only; the output's shards are
		// runs of their own.
		return rel == schema.LockFile || strings.HasPrefix(rel, schema.ShardsDir+"/")
	}}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output.dir: staging directory: %w", err)
	}
	if _, err := r.remote.mirror.Pull(ctx); err != nil {
		return storeError("output.dir", where, err)
	}
	r.cfg.Output.Dir = out
	return nil
}

// displayPath is a path under the staging directory as the user named
// it: under the s3:// output.dir.
func (r *run) displayPath(p string) string {
	if r.remote.url == nil || p == "" {
		return p
	}
	rel, err := filepath.Rel(r.cfg.Output.Dir, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	if rel == "." {
		return r.remote.url.String()
	}
	return r.remote.url.Join(filepath.ToSlash(rel)).String()
}

// localSource downloads an s3:// source.path into the staging directory
// and returns the local copy's path; a local source.path is returned as
// it is.
func (r *run) localSource(ctx context.Context) (string, error) {
	return fetchSource(ctx, r.cfg.Source.Path, func() (string, error) {
		if r.remote.staging == "" {
			staging, err := os.MkdirTemp("", "trajflow-staging-")
			if err != nil {
				return "", err
			}
			r.remote.staging = staging
			r.closers.add(func() { _ = os.RemoveAll(staging) }) // best effort: a temporary directory, not output
		}
		return r.remote.staging, nil
	})
}

// fetchSource downloads source.path p, when an s3:// URL, into the
// directory staging returns and returns the local copy's path; a local
// path is returned as it is.
func fetchSource(ctx context.Context, p string, staging func() (string, error)) (string, error) {
	if !storage.IsURL(p) {
		return p, nil
	}
	u, err := storage.ParseURL(p)
	if err != nil {
		return "", fmt.Errorf("source.path: %w", err)
	}
	s, err := openStore("source.path", p)
	if err != nil {
		return "", err
	}
	root, err := staging()
	if err != nil {
		return "", fmt.Errorf("source.path: staging directory: %w", err)
	}
	dir := filepath.Join(root, "source")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("source.path: %w", err)
	}
	local, err := s.Download(ctx, u, dir)
	if err != nil {
		return "", storeError("source.path", p, err)
	}
	return local, nil
}
