package shards

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/schema"
)

// Manifest is a sharded run's identity, written by the first shard to
// start and checked by every other: the shards of one run share its config
// (but for the shard index), shard count and schema version.
type Manifest struct {
	// RunID is the run's run_id.
	RunID string `json:"run_id"`
	// Shards is the shard count.
	Shards int `json:"shards"`
	// ConfigFingerprint is the hash of the config's semantic keys without
	// the shard index; Config is the canonical JSON it was computed from,
	// to name the keys that differ.
	ConfigFingerprint string `json:"config_fingerprint"`
	Config            string `json:"config"`
	// SchemaVersion is the version of the output schema the shards write.
	SchemaVersion string `json:"schema_version"`
	// Trajflow is the version of trajflow that wrote the manifest.
	Trajflow string `json:"trajflow_version"`
	// Created is when the first shard started.
	Created time.Time `json:"created"`
}

// ReadManifest reads root's manifest; ok is false when there is none.
func ReadManifest(root string) (m *Manifest, ok bool, err error) {
	path := filepath.Join(root, schema.ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	m = &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, true, fmt.Errorf("%s is unreadable: %w", path, err)
	}
	return m, true, nil
}

// CreateManifest writes m as root's manifest unless root has one: it is
// written beside its place and linked into it, so that of shards starting
// at once exactly one writes it and the others read that one whole. It
// returns the manifest that is in place and whether this call wrote it.
func CreateManifest(root string, m Manifest) (*Manifest, bool, error) {
	if have, ok, err := ReadManifest(root); ok || err != nil {
		return have, false, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, false, err
	}
	if err := writeLinked(filepath.Join(root, schema.ManifestFile), append(b, '\n')); err != nil {
		if errors.Is(err, fs.ErrExist) {
			have, _, err := ReadManifest(root)
			return have, false, err
		}
		return nil, false, err
	}
	return &m, true, nil
}

// writeLinked writes data to a temporary file beside path and links it to
// path: it fails with fs.ErrExist when path exists, and never leaves a
// partial file at path. The file is readable by all; the directory is
// synced once the link is made.
func writeLinked(path string, data []byte) error {
	f, err := durable.Create(path, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = durable.Sync(f.File)
	}
	if err == nil {
		err = f.Close() // the temporary file's; Abort below removes it
	}
	if err == nil {
		err = os.Link(f.Name(), path)
	}
	// The temporary name goes either way: linked, the file stays at path.
	if aerr := f.Abort(); err == nil {
		err = aerr
	}
	if err != nil {
		return err
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("sync the directory of %s: %w", path, err)
	}
	return nil
}

// Status is what a shard's schema.ShardStatusFile holds.
type Status struct {
	Index int `json:"index"`
	Count int `json:"count"`
	// Complete is true when the shard's last run read its input to the end
	// (or reached groups.target); false when it was stopped or failed, and
	// a rerun resumes it.
	Complete bool `json:"complete"`
	// Stop says why the last run stopped early ("" when complete).
	Stop string `json:"stop,omitempty"`
	// Updated is when the last run ended.
	Updated time.Time `json:"updated"`
}

// WriteStatus replaces dir's schema.ShardStatusFile atomically
// (durable.WriteFile).
func WriteStatus(dir string, s Status) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, schema.ShardStatusFile), append(b, '\n'), 0o644)
}

// Shard is one shard directory found under a root.
type Shard struct {
	Index, Count int
	Dir          string
	// Status is the shard's schema.ShardStatusFile; nil when it has none
	// (its first run has not ended).
	Status *Status
}

// Complete reports whether the shard's last run read its input to the end.
func (s Shard) Complete() bool { return s.Status != nil && s.Status.Complete }

// Set is what a root holds: its manifest and its shard directories.
type Set struct {
	Root     string
	Manifest *Manifest // nil when the root has none
	Shards   []Shard   // sorted by index
	// Missing are the indices the manifest's count has no directory for.
	Missing []int
	// Other are shard directories of another count than the manifest's.
	Other []string
}

// Scan reads root's manifest and lists its shard directories; ok is false
// when root holds neither (it is not a sharded run's root).
func Scan(root string) (set *Set, ok bool, err error) {
	set = &Set{Root: root}
	m, hasManifest, err := ReadManifest(root)
	if err != nil {
		return nil, true, err
	}
	set.Manifest = m
	entries, err := os.ReadDir(filepath.Join(root, schema.ShardsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, true, err
	}
	have := map[int]bool{}
	for _, e := range entries {
		i, n, isShard := ParseName(e.Name())
		if !e.IsDir() || !isShard {
			continue
		}
		dir := filepath.Join(root, schema.ShardsDir, e.Name())
		if m != nil && n != m.Shards {
			set.Other = append(set.Other, dir)
			continue
		}
		s := Shard{Index: i, Count: n, Dir: dir}
		if b, err := os.ReadFile(filepath.Join(dir, schema.ShardStatusFile)); err == nil {
			var st Status
			if json.Unmarshal(b, &st) == nil {
				s.Status = &st
			}
		}
		have[i] = true
		set.Shards = append(set.Shards, s)
	}
	if !hasManifest && len(set.Shards) == 0 && len(set.Other) == 0 {
		return nil, false, nil
	}
	slices.SortFunc(set.Shards, func(a, b Shard) int { return a.Index - b.Index })
	if m != nil {
		for i := 0; i < m.Shards; i++ {
			if !have[i] {
				set.Missing = append(set.Missing, i)
			}
		}
	}
	return set, true, nil
}

// Incomplete are the shards whose last run did not read its input to the
// end (or has not ended).
func (s *Set) Incomplete() []Shard {
	var out []Shard
	for _, sh := range s.Shards {
		if !sh.Complete() {
			out = append(out, sh)
		}
	}
	return out
}

// Count is the manifest's shard count, or without a manifest the count
// the shard directories name (the largest, when they disagree).
func (s *Set) Count() int {
	if s.Manifest != nil {
		return s.Manifest.Shards
	}
	n := 0
	for _, sh := range s.Shards {
		n = max(n, sh.Count)
	}
	return n
}

// Summary says, in one line, how many shards the root holds and which are
// missing or incomplete: "4 of 4 shards, all complete".
func (s *Set) Summary() string {
	line := fmt.Sprintf("%d of %d shards", len(s.Shards), s.Count())
	if s.Manifest == nil {
		line += " (no " + schema.ManifestFile + ")"
	}
	var bad []string
	if len(s.Missing) > 0 {
		names := make([]string, len(s.Missing))
		for i, idx := range s.Missing {
			names[i] = Name(idx, s.Count())
		}
		bad = append(bad, fmt.Sprintf("%d missing (%s)", len(s.Missing), joinShort(names)))
	}
	if inc := s.Incomplete(); len(inc) > 0 {
		names := make([]string, len(inc))
		for i, sh := range inc {
			names[i] = filepath.Base(sh.Dir)
		}
		bad = append(bad, fmt.Sprintf("%d incomplete (%s)", len(inc), joinShort(names)))
	}
	if len(s.Other) > 0 {
		bad = append(bad, fmt.Sprintf("%d of another count, left out (%s)", len(s.Other), joinShort(s.Other)))
	}
	if len(bad) == 0 {
		return line + ", all complete"
	}
	for _, b := range bad {
		line += ", " + b
	}
	return line
}

// Whole reports whether every shard the manifest names is there and
// complete.
func (s *Set) Whole() bool {
	return s.Manifest != nil && len(s.Missing) == 0 && len(s.Incomplete()) == 0 && len(s.Shards) == s.Manifest.Shards
}

func joinShort(names []string) string {
	const most = 5
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, and %d more", strings.Join(names[:most], ", "), len(names)-most)
}
