package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/runner/build"
	"github.com/trajflow/trajflow/runner/resume"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// ErrManifest is returned when a run does not belong to the run whose
// manifest its output directory holds (resume.ErrManifest).
var ErrManifest = resume.ErrManifest

// provisionRoot makes the run's root ready: its secret key, shared by
// every shard of a run, and a sharded run's manifest (checkManifest). On
// object storage the root's two files are read from the bucket into a
// local directory, made there when missing, and created in the bucket
// only if still absent (a conditional PUT), so that shards starting at
// once agree on the ones written first.
func (r *run) provisionRoot(ctx context.Context) error {
	if !storage.IsURL(r.root) {
		if err := durable.MkdirAll(r.root, 0o755); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		return r.rootFiles(r.root)
	}
	u, err := storage.ParseURL(r.root)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	s, err := build.OpenStore("output.dir", r.root)
	if err != nil {
		return err
	}
	if err := s.Check(ctx, u.Bucket); err != nil {
		return build.StoreError("output.dir", r.root, err)
	}
	local, err := os.MkdirTemp("", "trajflow-root-")
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	r.closers.add(func() { _ = os.RemoveAll(local) }) // best effort: a temporary directory, not output
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
		if err := r.rootFiles(local); err != nil {
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
	return fmt.Errorf("output.dir %s: its %s and %s kept changing while this run read them", r.root, schema.SecretKeyFile, schema.ManifestFile)
}

// rootFiles reads or makes the secret key and the manifest in dir, the
// run's root or its local copy (resume.Root).
func (r *run) rootFiles(dir string) error {
	return resume.Root(r.cfg, dir, resume.RootOptions{Root: r.root, AllowConfigChange: r.opts.AllowConfigChange, Version: Version})
}

// writeShardStatus records, in a sharded run's shard directory, whether
// this run read its input to the end.
func (r *run) writeShardStatus(err error) error {
	complete := err == nil || errors.Is(err, ErrShortOfData)
	stop := ""
	if !complete {
		stop = r.built.Red.String(err.Error())
	}
	return resume.WriteShardStatus(r.cfg, complete, stop)
}
