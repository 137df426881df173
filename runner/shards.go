package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/internal/shards"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/storage"
)

// ManifestFile is the run manifest at a sharded run's root: the run's
// identity (config fingerprint without the shard index, shard count,
// schema version), written by the first shard to start.
const ManifestFile = shards.ManifestFile

// ShardStatusFile is written in a shard's directory at the end of each of
// its runs: whether it read its input to the end.
const ShardStatusFile = shards.StatusFile

// ErrManifest is returned when a run does not belong to the run whose
// manifest its output directory holds: another config, shard count or
// schema version, or an unsharded run on a sharded run's root (or the
// other way round).
var ErrManifest = errors.New("the output directory belongs to another run")

// checkManifest creates the root's manifest, or checks this run against
// the one there. It runs after the secret key is in use, before the
// shard's directory is made.
func (r *run) checkManifest(root string) error {
	cfg := r.cfg
	shard := cfg.Source.Shard
	have, ok, err := shards.ReadManifest(root)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	manifest := filepath.Join(root, ManifestFile)
	if root != r.root {
		manifest = storage.Join(r.root, ManifestFile)
	}
	if !shard.Sharded() {
		if ok {
			return fmt.Errorf("%w: %s is the root of a run of %d shards, and this run is not sharded; set source.shard (auto, or index and count %d), or use another output.dir",
				ErrManifest, manifest, have.Shards, have.Shards)
		}
		return nil
	}
	if parts, _ := filepath.Glob(filepath.Join(root, schema.DataDir, schema.PartGlob)); len(parts) > 0 {
		return fmt.Errorf("%w: %s holds the part files of a run that was not sharded (%s); a sharded run writes under %s/: use another output.dir",
			ErrManifest, r.root, filepath.Join(root, schema.DataDir), shards.Subdir)
	}
	fp, canonical := cfg.RunFingerprint()
	want := shards.Manifest{
		RunID: cfg.Run.ID, Shards: shard.Count, ConfigFingerprint: fp, Config: canonical,
		SchemaVersion: schema.Version, Trajflow: Version, Created: time.Now().UTC(),
	}
	have, created, err := shards.CreateManifest(root, want)
	if err != nil {
		return fmt.Errorf("output.dir: %s: %w", manifest, err)
	}
	if created {
		return nil
	}
	var diffs []string
	if have.Shards != want.Shards {
		diffs = append(diffs, fmt.Sprintf("shard count: %d → %d", have.Shards, want.Shards))
	}
	if have.SchemaVersion != want.SchemaVersion {
		diffs = append(diffs, fmt.Sprintf("schema version: %s → %s", have.SchemaVersion, want.SchemaVersion))
	}
	if have.ConfigFingerprint != want.ConfigFingerprint && !r.opts.AllowConfigChange {
		own := *cfg
		own.Source.Shard.Index = 0
		keys, err := own.DiffSemantic(have.Config)
		if err != nil || len(keys) == 0 {
			keys = []string{fmt.Sprintf("config fingerprint: %s → %s", have.ConfigFingerprint, want.ConfigFingerprint)}
		}
		diffs = append(diffs, keys...)
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this shard (%d of %d) differs from the run in %s: %s; run every shard with the run's config and shard count, or use another output.dir",
		ErrManifest, shard.Index, shard.Count, manifest, strings.Join(diffs, "; "))
}

// provisionRoot makes the run's root ready: its secret key, shared by
// every shard of a run, and a sharded run's manifest (checkManifest). On
// object storage the root's two files are read from the bucket into a
// local directory, made there when missing, and created in the bucket
// only if still absent (a conditional PUT), so that shards starting at
// once agree on the ones written first.
func (r *run) provisionRoot(ctx context.Context) error {
	if !storage.IsURL(r.root) {
		if err := os.MkdirAll(r.root, 0o755); err != nil {
			return fmt.Errorf("output.dir: %w", err)
		}
		return r.rootFiles(r.root)
	}
	u, err := storage.ParseURL(r.root)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	s, err := openStore("output.dir", r.root)
	if err != nil {
		return err
	}
	if err := s.Check(ctx, u.Bucket); err != nil {
		return storeError("output.dir", r.root, err)
	}
	local, err := os.MkdirTemp("", "trajflow-root-")
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	r.closers = append(r.closers, func() { _ = os.RemoveAll(local) }) // best effort: a temporary directory, not output
	names := []string{schema.SecretKeyFile, ManifestFile}
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
				return storeError("output.dir", u.Join(name).String(), err)
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
				return storeError("output.dir", u.Join(name).String(), err)
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
	return fmt.Errorf("output.dir %s: its %s and %s kept changing while this run read them", r.root, schema.SecretKeyFile, ManifestFile)
}

// rootFiles reads or makes the secret key and the manifest in dir, the
// run's root or its local copy.
func (r *run) rootFiles(dir string) error {
	key, err := secretKey(dir)
	if err != nil {
		return err
	}
	r.cfg.UseSecretKey(key)
	return r.checkManifest(dir)
}

// writeShardStatus records, in a sharded run's shard directory, whether
// this run read its input to the end.
func (r *run) writeShardStatus(err error) error {
	if !r.cfg.Source.Shard.Sharded() {
		return nil
	}
	st := shards.Status{
		Index: r.cfg.Source.Shard.Index, Count: r.cfg.Source.Shard.Count,
		Complete: err == nil || errors.Is(err, ErrShortOfData), Updated: time.Now().UTC(),
	}
	if !st.Complete {
		st.Stop = r.red.String(err.Error())
	}
	if werr := shards.WriteStatus(r.cfg.Output.Dir, st); werr != nil {
		return fmt.Errorf("output.dir: %w", werr)
	}
	return nil
}
