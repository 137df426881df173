package commit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The image store opens without what a crashed run was writing: the
// temporary files of internal/durable and those of earlier versions; the
// stored images stay.
func TestOpenImagesRemovesStaged(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"ab12.png", ".ab12.png.tmp-0f3c", ".tmp-image-123"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := openImages(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ab12.png"}) {
		t.Fatalf("left %v, want only the stored image", names)
	}
	if _, err := openImages(filepath.Join(dir, "none")); err != nil {
		t.Fatalf("a missing images directory: %v", err)
	}
}
