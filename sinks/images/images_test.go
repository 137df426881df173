package images_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
