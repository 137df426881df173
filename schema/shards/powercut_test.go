package shards_test

import (
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema/shards"
)

// TestManifestAndStatusSurviveAPowerCut: a sharded run's manifest and a
// shard's status, once written, are there after a power cut (crashfs
// drops what was not synced), in directories made as a run makes them
// (durable.MkdirAll).
func TestManifestAndStatusSurviveAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	root := filepath.Join(fsys.Root(), "runs", "sharded")
	shard := shards.Dir(root, 2, 4)
	if err := durable.MkdirAll(shard, 0o755); err != nil {
		t.Fatal(err)
	}
	want := shards.Manifest{RunID: "r", Shards: 4, ConfigFingerprint: "fp", SchemaVersion: "2"}
	if _, created, err := shards.CreateManifest(root, want); err != nil || !created {
		t.Fatalf("CreateManifest: created %v, %v", created, err)
	}
	if err := shards.WriteStatus(shard, shards.Status{Index: 2, Count: 4, Complete: true}); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	have, ok, err := shards.ReadManifest(root)
	if err != nil || !ok {
		t.Fatalf("manifest after the cut: found %v, %v", ok, err)
	}
	if have.RunID != want.RunID || have.Shards != want.Shards || have.ConfigFingerprint != want.ConfigFingerprint {
		t.Errorf("manifest after the cut: %+v, want %+v", *have, want)
	}
	set, ok, err := shards.Scan(root)
	if err != nil || !ok {
		t.Fatalf("scan after the cut: %v, %v", ok, err)
	}
	if len(set.Shards) != 1 || !set.Shards[0].Complete() || len(set.Missing) != 3 {
		t.Errorf("after the cut: shards %+v, missing %v; want shard 2 complete, 3 missing", set.Shards, set.Missing)
	}
}
