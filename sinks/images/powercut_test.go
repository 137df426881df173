package images_test

import (
	"encoding/base64"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/sinks/images"
)

// TestFoundImageSurvivesAPowerCut: a run killed (kill -9) after it
// renamed an image into images/ and before it synced the directory leaves
// the image under its name, not yet durable. The resume finds it there and
// references it from the rows it commits: Put must make it durable before
// it returns, or a power cut keeps the rows and loses the image (before:
// Put took a file it found as written, and after the cut Lookup found no
// file for a committed row's reference).
func TestFoundImageSurvivesAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	out := filepath.Join(fsys.Root(), "out")
	dir := filepath.Join(out, "images")
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := []byte("\x89PNG\r\n\x1a\nnot really a png, but bytes")
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(data)
	// The killed run's image: written, synced, renamed; its directory not
	// synced.
	ref, err := images.New(t.TempDir()).Put(url)
	if err != nil {
		t.Fatal(err)
	}
	hash := ref[len(images.Prefix):]
	crashfstest.WriteKilled(t, filepath.Join(dir, images.FileName(hash, "image/png")), data)
	// The resume.
	got, err := images.New(dir).Put(url)
	if err != nil || got != ref {
		t.Fatalf("Put = %q, %v; want %q", got, err, ref)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	b, _, err := images.Lookup(dir, ref)
	if err != nil || string(b) != string(data) {
		t.Fatalf("after the cut, the image a committed row may reference: %q, %v", b, err)
	}
}
