package cache

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
)

// TestEntryOfAKilledRunSurvivesAPowerCut: a run killed (kill -9) after it
// renamed an entry into place and before it synced the entry's directory
// (or after it made the directory and before it synced the cache's)
// leaves an entry whose name is not durable. A resume opens the cache,
// is answered from that entry and commits the row it makes; Open must
// make the entries it finds durable, or a power cut keeps the row and
// loses the answer recorded for it (TestPowerCutCache found it: "the
// cache holds 147 entries after the cut, for 150 committed rows").
func TestEntryOfAKilledRunSurvivesAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := filepath.Join(fsys.Root(), "cache")
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	k := KeyOf([]byte("a request"))
	if err := s.Put(k, map[string]string{"answer": "42"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, rel(k)))
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	// The killed run's entry: its directory made and the entry written,
	// synced and renamed, neither directory synced.
	if err := os.RemoveAll(filepath.Join(dir, filepath.Dir(rel(k)))); err != nil {
		t.Fatal(err)
	}
	if err := durable.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, filepath.Dir(rel(k))), 0o755); err != nil {
		t.Fatal(err)
	}
	crashfstest.WriteKilled(t, filepath.Join(dir, rel(k)), b)
	// The resume.
	s, err = Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	if !s.Get(k, &v) || v["answer"] != "42" {
		t.Fatalf("the resume's Get: %v", v)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v = nil; !s.Get(k, &v) || v["answer"] != "42" {
		t.Fatalf("after the cut, the entry the resume was answered from is gone: %v", v)
	}
}
