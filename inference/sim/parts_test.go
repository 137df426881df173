package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

const png1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC"

// The simulator sees an image part: its marker is rendered in place, and
// a question with an image is answered with the image's size.
func TestImageParts(t *testing.T) {
	text, parts, err := contentParts(json.RawMessage(`[{"type":"text","text":"How big?"},{"type":"image_url","image_url":{"url":"` + png1 + `"}}]`))
	if err != nil || text != "How big?" || len(parts) != 2 || parts[1].ImageURL != png1 {
		t.Fatalf("%q %+v %v", text, parts, err)
	}
	m := pipeline.Message{Role: "user", Content: text, Parts: parts}
	if got := messageText(&m); !strings.HasPrefix(got, "How big?\n<image image/png 69 bytes sha256:") {
		t.Fatalf("rendered %q", got)
	}
	s := New(Options{Seed: 1, Accuracy: 2}) // always right
	defer s.Close()
	in, err := s.chatInput([]pipeline.Message{m}, map[string]any{"seed": 3, "max_tokens": 512}, nil)
	if err != nil || in.image != 69 {
		t.Fatalf("image %d, %v", in.image, err)
	}
	if _, _, err := contentParts(json.RawMessage(`[{"type":"image_url","image_url":{"url":"file:///x"}}]`)); err == nil {
		t.Error("accepted a file URL")
	}
}

// FuzzContentParts: the simulator's content reader never panics, and the
// image parts it keeps are URLs trajflow accepts.
func FuzzContentParts(f *testing.F) {
	for _, s := range []string{`"hi"`, `null`, `[{"type":"text","text":"a"},{"type":"image_url","image_url":"` + png1 + `"}]`,
		`[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]`, `[{"type":"image_url","image_url":3}]`, `[1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, parts, err := contentParts(json.RawMessage(s))
		if err != nil {
			return
		}
		for _, p := range parts {
			if p.Type == pipeline.PartImage && pipeline.CheckImageURL(p.ImageURL) != nil {
				t.Fatalf("kept %q", p.ImageURL)
			}
			_ = ImageMarker(p.ImageURL)
		}
	})
}
