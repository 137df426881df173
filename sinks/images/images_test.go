package images_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/images"
)

const png1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

func TestExternalize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	s := images.New(dir)
	shared := []pipeline.ContentPart{{Type: "text", Text: "see"}, {Type: "image_url", ImageURL: png1}, {Type: "image_url", ImageURL: "https://h/x.png"}}
	a := []pipeline.Message{{Role: "user", Content: "see", Parts: shared}}
	b := []pipeline.Message{{Role: "user", Content: "see", Parts: shared}}
	if err := s.Externalize(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Externalize(b); err != nil {
		t.Fatal(err)
	}
	if shared[1].ImageURL != png1 {
		t.Fatal("the shared parts changed")
	}
	ref := a[0].Parts[1].ImageURL
	if ref != b[0].Parts[1].ImageURL || len(ref) != len("sha256:")+64 || a[0].Parts[2].ImageURL != "https://h/x.png" {
		t.Fatalf("parts %+v", a[0].Parts)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 {
		t.Fatalf("%d files, want 1", len(files))
	}
	data, ext, err := images.Lookup(dir, ref)
	_, want, _ := pipeline.ParseDataURL(png1)
	if err != nil || ext != "png" || !bytes.Equal(data, want) {
		t.Fatalf("Lookup = %d bytes %q %v", len(data), ext, err)
	}
	// A new Store (a resumed run) finds the file and writes nothing.
	if got, err := images.New(dir).Put(png1); err != nil || got != ref {
		t.Fatalf("Put = %q %v", got, err)
	}
	if _, _, err := images.Lookup(dir, "sha256:00"); err == nil {
		t.Error("Lookup accepted a short hash")
	}
}

func ExampleStore_Put() {
	dir, _ := os.MkdirTemp("", "images")
	defer os.RemoveAll(dir)
	ref, err := images.New(dir).Put("data:image/png;base64,aGVsbG8=")
	if err != nil {
		panic(err)
	}
	data, ext, _ := images.Lookup(dir, ref)
	fmt.Println(ref)
	fmt.Println(string(data), ext)
	// Output:
	// sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	// hello png
}

// TestCopyDir: stored images are copied once (those already in dst are
// left), other files are not copied, a file whose bytes do not hash to its
// name is refused naming it, and a missing source holds nothing.
func TestCopyDir(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	put := func(dir, name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hashOf := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	a, b := []byte("png bytes a"), []byte("jpeg bytes b")
	put(src, hashOf(a)+".png", a)
	put(src, hashOf(b)+".jpeg", b)
	put(src, ".tmp-image-123", []byte("partial"))
	put(src, "notes.txt", []byte("not an image"))
	put(dst, hashOf(b)+".jpeg", b)
	copied, had, err := images.CopyDir(src, dst)
	if err != nil || copied != 1 || had != 1 {
		t.Fatalf("CopyDir = %d copied, %d had, %v; want 1, 1", copied, had, err)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 2 {
		t.Fatalf("dst holds %d files, want the 2 images", len(entries))
	}
	if got, _, err := images.Lookup(dst, images.Prefix+hashOf(a)); err != nil || string(got) != string(a) {
		t.Fatalf("copied image: %q, %v", got, err)
	}
	bad := filepath.Join(src, hashOf([]byte("other"))+".png")
	put(src, filepath.Base(bad), []byte("tampered"))
	if _, _, err := images.CopyDir(src, t.TempDir()); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a mismatched image: %v, want an error naming %s", err, bad)
	}
	if c, h, err := images.CopyDir(filepath.Join(src, "missing"), dst); c != 0 || h != 0 || err != nil {
		t.Fatalf("missing source: %d, %d, %v", c, h, err)
	}
}
