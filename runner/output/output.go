// Package output readies a run's output directory before anything is
// written there: the root's files (the secret key shared by every shard,
// a sharded run's manifest), and for an s3:// output.dir the staging
// mirror, the prefix's lock and the upload, and for an s3:// source.path
// its download.
package output

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// Closers take what the run undoes at its end: Add a closer whose
// failure is no error of the run's, Check one whose error the run
// returns.
type Closers interface {
	Add(close func())
	Check(close func() error)
}

// Root makes the run's root ready: every name already in it durable
// (Sync), its secret key, shared by every shard of a run, and a sharded
// run's manifest (resume.Root, with opts). On object storage the root's
// two files are read from the bucket into a local directory, made there
// when missing, and created in the bucket only if still absent (a
// conditional PUT), so that shards starting at once agree on the ones
// written first.
func Root(ctx context.Context, cfg *config.Config, opts resume.RootOptions, c Closers) error {
	root := opts.Root
	files := func(dir string) error { return resume.Root(cfg, dir, opts) }
	if !storage.IsURL(root) {
		if err := durable.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		// A run killed between a rename and its directory's sync left
		// parts (a key, a shard's directory) that this run would take as
		// committed and a power cut would take back: made durable before
		// this run builds on them (on object storage the bucket is the
		// record).
		if err := Sync(root, cfg.Output.Dir); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		return files(root)
	}
	u, err := storage.ParseURL(root)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	s, err := build.OpenStore("output.dir", root)
	if err != nil {
		return err
	}
	if err := s.Check(ctx, u.Bucket); err != nil {
		return build.StoreError("output.dir", root, err)
	}
	local, err := os.MkdirTemp("", "trajflow-root-")
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	c.Add(func() { _ = os.RemoveAll(local) }) // best effort: a temporary directory, not output
	names := []string{schema.SecretKeyFile, schema.ManifestFile}
	for attempt := 0; attempt < 4; attempt++ {
		pulled := map[string]bool{}
		for _, name := range names {
			dst := filepath.Join(local, name)
			if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("output.dir: %w", err)
			}
			switch err := s.Get(ctx, u.Bucket, u.Join(name).Key, dst); {
			case err == nil:
				pulled[name] = true
			case !storage.IsNotFound(err):
				return build.StoreError("output.dir", u.Join(name).String(), err)
			}
		}
		if err := files(local); err != nil {
			return err
		}
		raced := false
		for _, name := range names {
			path := filepath.Join(local, name)
			if _, err := os.Stat(path); pulled[name] || err != nil {
				continue // the bucket's own, or none made (an unsharded run)
			}
			created, err := s.Create(ctx, u.Bucket, u.Join(name).Key, path)
			if err != nil {
				return build.StoreError("output.dir", u.Join(name).String(), err)
			}
			if !created {
				raced = true // another shard wrote it first: read theirs
				break
			}
		}
		if !raced {
			return nil
		}
	}
	return fmt.Errorf("output.dir %s: its %s and %s kept changing while this run read them", root, schema.SecretKeyFile, schema.ManifestFile)
}

// Remote is the run's object storage side: output.dir and source.path
// given as s3:// URLs. The run works in a local staging directory that
// mirrors output.dir: what earlier runs committed is downloaded before the
// resume reads it, each file is uploaded when it commits (the side files
// first, then the part file), and the staging directory is removed at
// the end. Its zero value is a local output.
type Remote struct {
	// url is output.dir as given; nil when the output is local.
	url     *storage.URL
	mirror  *storage.Mirror
	lock    *storage.Lock
	staging string
}

// Provision prepares an s3:// output.dir: it checks the bucket, takes the
// prefix's lock (fail hears of its loss), aborts the multipart uploads a
// crashed run left, downloads what is committed into a staging directory,
// and points cfg.Output.Dir at it for the rest of the run.
func (o *Remote) Provision(ctx context.Context, cfg *config.Config, fail func(error), c Closers) error {
	where := cfg.Output.Dir
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
		fail(fmt.Errorf("output.dir %s: %w", where, err))
	})
	if err != nil {
		return build.StoreError("output.dir", where, err)
	}
	o.url, o.lock = &u, lock
	c.Check(func() error {
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
	o.staging = staging
	c.Add(func() { _ = os.RemoveAll(staging) }) // best effort: a temporary directory, not output
	out := filepath.Join(staging, "output")
	o.mirror = &storage.Mirror{Store: s, URL: u, Local: out, Last: schema.DataDir, Skip: func(rel string) bool {
		// The lock lives in the bucket only; the output's shards are
		// runs of their own.
		return rel == schema.LockFile || strings.HasPrefix(rel, schema.ShardsDir+"/")
	}}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output.dir: staging directory: %w", err)
	}
	if _, err := o.mirror.Pull(ctx); err != nil {
		return build.StoreError("output.dir", where, err)
	}
	cfg.Output.Dir = out
	return nil
}

// Mirrored reports whether the output is on object storage.
func (o *Remote) Mirrored() bool { return o.mirror != nil }

// Display is a path p under the staging directory dir as the user named
// it: under the s3:// output.dir.
func (o *Remote) Display(dir, p string) string {
	if o.url == nil || p == "" {
		return p
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	if rel == "." {
		return o.url.String()
	}
	return o.url.Join(filepath.ToSlash(rel)).String()
}

// Source downloads an s3:// source.path into the staging directory and
// returns the local copy's path; a local path is returned as it is.
func (o *Remote) Source(ctx context.Context, path string, c Closers) (string, error) {
	return build.FetchSource(ctx, path, func() (string, error) {
		if o.staging == "" {
			staging, err := os.MkdirTemp("", "trajflow-staging-")
			if err != nil {
				return "", err
			}
			o.staging = staging
			c.Add(func() { _ = os.RemoveAll(staging) }) // best effort: a temporary directory, not output
		}
		return o.staging, nil
	})
}

// Upload is the committer's upload to object storage (the mirror's
// push); nil for a local output directory.
func (o *Remote) Upload() func(ctx context.Context) error {
	if o.mirror == nil {
		return nil
	}
	return func(ctx context.Context) error {
		if _, err := o.mirror.Push(ctx); err != nil {
			return build.StoreError("output.dir", o.url.String(), err)
		}
		return nil
	}
}

// Sync makes durable every name of the run's output directory dir
// (durable.SyncTree: its tree and its parent) and, for a shard's
// directory under root, every directory from there up to root's parent:
// a shard syncs its own tree, not its siblings'.
func Sync(root, dir string) error {
	if err := durable.SyncTree(dir); err != nil {
		return err
	}
	root, dir = filepath.Clean(root), filepath.Clean(dir)
	if dir == root || !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		return nil
	}
	for d := filepath.Dir(dir); d != root; {
		d = filepath.Dir(d)
		if err := durable.SyncDir(d); err != nil {
			return err
		}
	}
	return durable.SyncDir(filepath.Dir(root))
}
