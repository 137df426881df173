package shards_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/schema/shards"
)

func TestCreateManifestOnce(t *testing.T) {
	root := t.TempDir()
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		seen    = map[string]bool{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, ok, err := shards.CreateManifest(root, shards.Manifest{Shards: 4, ConfigFingerprint: string(rune('a' + i))})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				created++
			}
			seen[m.ConfigFingerprint] = true
		}()
	}
	wg.Wait()
	if created != 1 || len(seen) != 1 {
		t.Errorf("%d writers, %d manifests seen; want one of each", created, len(seen))
	}
	if left, _ := filepath.Glob(filepath.Join(root, ".manifest.json.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestScan(t *testing.T) {
	root := t.TempDir()
	if _, ok, err := shards.Scan(root); ok || err != nil {
		t.Fatalf("an empty directory scanned as a root: %v, %v", ok, err)
	}
	if _, _, err := shards.CreateManifest(root, shards.Manifest{Shards: 3}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00000-of-00003", "00002-of-00003", "00001-of-00005", "notes"} {
		if err := os.MkdirAll(filepath.Join(root, "shards", name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := shards.WriteStatus(filepath.Join(root, "shards", "00000-of-00003"), shards.Status{Index: 0, Count: 3, Complete: true}); err != nil {
		t.Fatal(err)
	}
	set, ok, err := shards.Scan(root)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	want := "2 of 3 shards, 1 missing (00001-of-00003), 1 incomplete (00002-of-00003), 1 of another count, left out (" +
		filepath.Join(root, "shards", "00001-of-00005") + ")"
	if got := set.Summary(); got != want {
		t.Errorf("summary\n%s\nwant\n%s", got, want)
	}
	if set.Whole() {
		t.Error("a root with a missing shard is whole")
	}
	if err := os.Remove(filepath.Join(root, "shards", "00001-of-00005")); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		dir := filepath.Join(root, "shards", shards.Name(i, 3))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := shards.WriteStatus(dir, shards.Status{Index: i, Count: 3, Complete: true}); err != nil {
			t.Fatal(err)
		}
	}
	set, _, _ = shards.Scan(root)
	if !set.Whole() || set.Summary() != "3 of 3 shards, all complete" {
		t.Errorf("whole root: %v, %q", set.Whole(), set.Summary())
	}
}
