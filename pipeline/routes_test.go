package pipeline_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// routes builds 1-layer, top-1 routes from one id per position.
func routes(ids ...int16) *pipeline.Routes {
	return &pipeline.Routes{Layers: 1, TopK: 1, Experts: ids}
}

func TestRoutesMerge(t *testing.T) {
	const x = pipeline.NotRouted
	tests := []struct {
		name    string
		dst     *pipeline.Routes
		src     *pipeline.Routes
		offset  int
		want    []int16
		wantErr string
	}{
		{"first answer", nil, routes(1, 2, 3), 0, []int16{1, 2, 3}, ""},
		{"none", routes(1), nil, 0, []int16{1}, ""},
		{"prefix kept, new appended", routes(1, 2), routes(9, 9, 3, 4), 0, []int16{1, 2, 3, 4}, ""},
		{"gap marked", routes(1), routes(5, 6), 3, []int16{1, x, x, 5, 6}, ""},
		{"gap filled later", routes(1, x, 3), routes(7, 8, 9), 0, []int16{1, 8, 3}, ""},
		{"shorter answer", routes(1, 2, 3), routes(7), 0, []int16{1, 2, 3}, ""},
		{"shape differs", routes(1), &pipeline.Routes{Layers: 2, TopK: 1, Experts: []int16{1, 2}}, 0, nil, "2 layers × top 1, earlier answers' 1 × 1"},
		{"bad shape", nil, &pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{1, 2, 3}}, 0, nil, "not a whole number"},
		{"negative offset", nil, routes(1), -1, nil, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before []int16
			if tt.dst != nil {
				before = slices.Clone(tt.dst.Experts)
			}
			got, err := tt.dst.Merge(tt.src, tt.offset)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Experts, tt.want) {
				t.Errorf("Experts = %v, want %v", got.Experts, tt.want)
			}
			if tt.dst != nil && !slices.Equal(tt.dst.Experts, before) {
				t.Errorf("dst written: %v, was %v", tt.dst.Experts, before)
			}
		})
	}
}

func TestRoutesAtCut(t *testing.T) {
	r := &pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{1, 2, 3, 4, -1, -1, -1, -1, 5, 6, 7, 8}}
	if r.Positions() != 3 || !slices.Equal(r.At(2), []int16{5, 6, 7, 8}) || r.Routed(1) || !r.Routed(0) || r.At(3) != nil {
		t.Errorf("Positions %d, At(2) %v, Routed(1) %v", r.Positions(), r.At(2), r.Routed(1))
	}
	if c := r.Cut(1); c.Positions() != 1 || r.Positions() != 3 {
		t.Errorf("Cut(1) = %d positions", c.Positions())
	}
	if r.Cut(0) != nil || r.Cut(5) != r {
		t.Error("Cut(0) not nil or Cut(5) not r")
	}
	var none *pipeline.Routes
	if none.Positions() != 0 || none.At(0) != nil || none.Routed(0) {
		t.Error("nil routes")
	}
}
