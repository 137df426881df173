package pipeline_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// png1 is a 1×1 PNG as a data URL.
const png1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

func decode(t *testing.T, js string) ([]pipeline.Message, error) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	return pipeline.DecodeMessages(v, "messages")
}

func TestDecodeContentParts(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []pipeline.Message
		wantErr string
	}{
		{"text parts only", `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
			[]pipeline.Message{{Role: "user", Content: "a\nb"}}, ""},
		{"chat image part", `[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + png1 + `","detail":"low"}}]}]`,
			[]pipeline.Message{{Role: "user", Content: "What is this?", Parts: []pipeline.ContentPart{
				{Type: "text", Text: "What is this?"}, {Type: "image_url", ImageURL: png1}}}}, ""},
		{"image first, two texts", `[{"role":"user","content":[{"type":"image_url","image_url":"https://example.com/a.png"},{"type":"text","text":"x"},{"type":"text","text":"y"}]}]`,
			[]pipeline.Message{{Role: "user", Content: "x\ny", Parts: []pipeline.ContentPart{
				{Type: "image_url", ImageURL: "https://example.com/a.png"}, {Type: "text", Text: "x"}, {Type: "text", Text: "y"}}}}, ""},
		{"responses input_image", `[{"type":"message","role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"` + png1 + `"}]}]`,
			[]pipeline.Message{{Role: "user", Content: "see", Parts: []pipeline.ContentPart{
				{Type: "text", Text: "see"}, {Type: "image_url", ImageURL: png1}}}}, ""},
		{"not an image type", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGk="}}]}]`,
			nil, `messages[0].content[0].image_url: data URL media type "text/plain" is not an image type`},
		{"not base64", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]`,
			nil, `messages[0].content[0].image_url: data URL "image/png" is not base64`},
		{"bad payload", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@"}}]}]`,
			nil, `messages[0].content[0].image_url: data URL payload: illegal base64 data`},
		{"ftp URL", `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]`,
			nil, `messages[0].content[0].image_url: want a data:image/...;base64, URL or an http(s) URL, got "ftp://x/y.png"`},
		{"no url", `[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]`,
			nil, `messages[0].content[0].image_url: missing "url"`},
		{"no image_url", `[{"role":"user","content":[{"type":"image_url"}]}]`,
			nil, `messages[0].content[0]: missing "image_url"`},
		{"audio", `[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]`,
			nil, `messages[0].content[0]: unsupported content part type "input_audio" (want text or image_url)`},
		{"image in a tool output", `[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"` + png1 + `"}]}]`,
			nil, `messages[0].output: image parts are not allowed here`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decode(t, tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseDataURL(t *testing.T) {
	mime, data, err := pipeline.ParseDataURL(png1)
	if err != nil || mime != "image/png" || string(data[1:4]) != "PNG" {
		t.Fatalf("%q %q %v", mime, data, err)
	}
}

// FuzzDecodeMessages: any JSON either decodes or is an error naming a
// place under "messages"; never a panic. Decoded image parts hold URLs
// CheckImageURL accepts, and Content is the join of the text parts.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"` + png1 + `"}}]}]`,
		`[{"role":"user","content":[{"type":"input_image","image_url":"https://h/x.png"},"bare"]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/;base64,"}}]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64"}}]}]`,
		`"hi"`, `[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":{}}}]}]`,
		`[{"type":"function_call","name":"f"},{"type":"function_call_output","output":[{"text":"x"}]}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		var v any
		if json.Unmarshal([]byte(js), &v) != nil {
			return
		}
		msgs, err := pipeline.DecodeMessages(v, "messages")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "messages") {
				t.Fatalf("error does not name its place: %v", err)
			}
			return
		}
		for _, m := range msgs {
			var texts []string
			for _, p := range m.Parts {
				switch p.Type {
				case pipeline.PartImage:
					if err := pipeline.CheckImageURL(p.ImageURL); err != nil {
						t.Fatalf("decoded an image part the check refuses: %v", err)
					}
				case pipeline.PartText:
					texts = append(texts, p.Text)
				default:
					t.Fatalf("part type %q", p.Type)
				}
			}
			if m.Parts != nil && (!m.HasImages() || strings.Join(texts, "\n") != m.Content) {
				t.Fatalf("parts %+v content %q", m.Parts, m.Content)
			}
		}
	})
}

func ExampleDecodeMessages_image() {
	var v any
	_ = json.Unmarshal([]byte(`[{"role": "user", "content": [
		{"type": "text", "text": "What is this?"},
		{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]`), &v)
	msgs, err := pipeline.DecodeMessages(v, "messages")
	if err != nil {
		panic(err)
	}
	m := msgs[0]
	mime, data, _ := pipeline.ParseDataURL(m.Parts[1].ImageURL)
	fmt.Println(m.Content, m.HasImages(), mime, string(data))
	// Output: What is this? true image/png hello
}

// ChatParts writes what DecodeContent reads back.
func TestChatPartsRoundTrip(t *testing.T) {
	parts := []pipeline.ContentPart{{Type: pipeline.PartText, Text: "look"},
		{Type: pipeline.PartImage, ImageURL: "data:image/png;base64,iVBORw0KGgo="}, {Type: pipeline.PartImage, ImageURL: "https://h/x.png"}}
	b, err := json.Marshal(pipeline.ChatParts(parts))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	text, got, err := pipeline.DecodeContent(v, "content")
	if err != nil || text != "look" || !reflect.DeepEqual(got, parts) {
		t.Fatalf("DecodeContent(%s) = %q, %+v, %v; want %+v", b, text, got, err, parts)
	}
}
