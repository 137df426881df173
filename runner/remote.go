package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// ErrStorage is returned when object storage refuses the run: bad or
// missing credentials, a missing bucket, a bad endpoint
// (build.ErrStorage). The command exits 4.
var ErrStorage = build.ErrStorage

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
	s, err := build.OpenStore("output.dir", where)
	if err != nil {
		return err
	}
	if err := s.Check(ctx, u.Bucket); err != nil {
		return build.StoreError("output.dir", where, err)
	}
	lock, err := s.TakeLock(ctx, u.Bucket, u.Join(schema.LockFile).Key, func(err error) {
		r.fail(fmt.Errorf("output.dir %s: %w", where, err))
	})
	if err != nil {
		return build.StoreError("output.dir", where, err)
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
		return build.StoreError("output.dir", where, err)
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
		return build.StoreError("output.dir", where, err)
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
	return build.FetchSource(ctx, r.cfg.Source.Path, func() (string, error) {
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
