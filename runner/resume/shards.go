package resume

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/schema/shards"
	"github.com/trajflow/trajflow/storage"
)

// ErrManifest is returned when a run does not belong to the run whose
// manifest its output directory holds: another config, shard count or
// schema version, or an unsharded run on a sharded run's root (or the
// other way round).
var ErrManifest = errors.New("the output directory belongs to another run")

// RootOptions are Root's settings.
type RootOptions struct {
	// Root is the run's root as the config names it (output.dir before
	// the shard's directory): the name messages give.
	Root string
	// AllowConfigChange lets a shard of another config join the run.
	AllowConfigChange bool
	// Version is trajflow's version, recorded in a new manifest.
	Version string
}

// checkManifest creates the manifest in dir, the root or its local copy,
// or checks this run against the one there. It runs after the secret key
// is in use, before the shard's directory is made.
func checkManifest(cfg *config.Config, dir string, opts RootOptions) error {
	shard := cfg.Source.Shard
	have, ok, err := shards.ReadManifest(dir)
	if err != nil {
		return fmt.Errorf("output.dir: %w", err)
	}
	manifest := filepath.Join(dir, schema.ManifestFile)
	if dir != opts.Root {
		manifest = storage.Join(opts.Root, schema.ManifestFile)
	}
	if !shard.Sharded() {
		if ok {
			return fmt.Errorf("%w: %s is the root of a run of %d shards, and this run is not sharded; set source.shard (auto, or index and count %d), or use another output.dir",
				ErrManifest, manifest, have.Shards, have.Shards)
		}
		return nil
	}
	if parts, _ := filepath.Glob(filepath.Join(dir, schema.DataDir, schema.PartGlob)); len(parts) > 0 {
		return fmt.Errorf("%w: %s holds the part files of a run that was not sharded (%s); a sharded run writes under %s/: use another output.dir",
			ErrManifest, opts.Root, filepath.Join(dir, schema.DataDir), schema.ShardsDir)
	}
	fp, canonical := cfg.RunFingerprint()
	want := shards.Manifest{
		RunID: cfg.Run.ID, Shards: shard.Count, ConfigFingerprint: fp, Config: canonical,
		SchemaVersion: schema.Version, Trajflow: opts.Version, Created: time.Now().UTC(),
	}
	have, created, err := shards.CreateManifest(dir, want)
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
	if have.ConfigFingerprint != want.ConfigFingerprint && !opts.AllowConfigChange {
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

// Root reads or makes the secret key and the manifest in dir, the run's
// root or its local copy, and keys cfg's fingerprint with the key
// (config.Config.UseSecretKey).
func Root(cfg *config.Config, dir string, opts RootOptions) error {
	key, err := SecretKey(dir)
	if err != nil {
		return err
	}
	cfg.UseSecretKey(key)
	return checkManifest(cfg, dir, opts)
}

// WriteShardStatus records, in a sharded run's shard directory, whether
// this run read its input to the end (complete) and otherwise what
// stopped it.
func WriteShardStatus(cfg *config.Config, complete bool, stop string) error {
	if !cfg.Source.Shard.Sharded() {
		return nil
	}
	st := shards.Status{
		Index: cfg.Source.Shard.Index, Count: cfg.Source.Shard.Count,
		Complete: complete, Updated: time.Now().UTC(),
	}
	if !complete {
		st.Stop = stop
	}
	if werr := shards.WriteStatus(cfg.Output.Dir, st); werr != nil {
		return fmt.Errorf("output.dir: %w", werr)
	}
	return nil
}
