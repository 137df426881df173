package jsonl_test

import (
	"bufio"
	"bytes"
	"context"
	"testing"

	"github.com/trajflow/trajflow/internal/gymcontract"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/sinks/jsonl"
)

// Every line validates with Gym's models as a verify answer
// (BaseVerifyResponse: responses_create_params forbid undeclared keys),
// so Gym reads it back: with and without the seed added, for rows with
// tool calls, reasoning, images, invalid UTF-8, errors and nothing at all.
func TestLinesValidateWithGymModels(t *testing.T) {
	models, err := gymcontract.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		groups  []*pipeline.Group
		params  map[string]any
		addSeed bool
	}{
		{"fixtures", []*pipeline.Group{pipelinetest.Group(0, 3, 200), pipelinetest.Group(1, 3, 200)}, nil, false},
		{"live, no seed", []*pipeline.Group{liveGroup()}, map[string]any{"max_tokens": 64, "reasoning_effort": "low", "top_p": 0.9}, false},
		{"live, seed added", []*pipeline.Group{liveGroup()}, map[string]any{"temperature": 1.0}, true},
		{"invalid UTF-8", []*pipeline.Group{badUTF8Group()}, nil, true},
		{"sparse", []*pipeline.Group{sparseGroup()}, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := jsonl.New(&buf)
			w.Overrides(tt.params, tt.addSeed)
			if err := w.WriteGroups(context.Background(), tt.groups); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(&buf)
			sc.Buffer(nil, 1<<22)
			n := 0
			for sc.Scan() {
				n++
				if err := models.Validate("BaseVerifyResponse", sc.Bytes()); err != nil {
					t.Errorf("line %d: %v", n, err)
				}
				if bytes.Contains(sc.Bytes(), []byte(`"extra_body":"{\"seed\":`)) != tt.addSeed {
					t.Errorf("line %d: add_seed %v, but the line is %s", n, tt.addSeed, sc.Bytes())
				}
			}
			if n == 0 {
				t.Fatal("no lines")
			}
		})
	}
}
