package schema_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

func TestEncodeRoutes(t *testing.T) {
	const x = pipeline.NotRouted
	r := &pipeline.Routes{Layers: 1, TopK: 2, Experts: []int16{1, 2, x, x, 5, 6}}
	tests := []struct {
		name      string
		r         *pipeline.Routes
		positions int
		want      []int16
	}{
		{"none", nil, 4, nil},
		{"padded", r, 4, []int16{1, 2, 1, 2, x, x, 5, 6, x, x}},
		{"exact", r, 3, []int16{1, 2, 1, 2, x, x, 5, 6}},
		{"cut", r, 1, []int16{1, 2, 1, 2}},
		{"no positions", r, 0, []int16{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schema.EncodeRoutes(tt.r, tt.positions)
			if !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("EncodeRoutes = %v, want %v", got, tt.want)
			}
			back, err := schema.DecodeRoutes(got, tt.positions)
			if err != nil {
				t.Fatal(err)
			}
			if (back == nil) != (tt.r == nil) || back != nil && !slices.Equal(back.Experts, got[2:]) {
				t.Errorf("DecodeRoutes = %+v", back)
			}
		})
	}
}

func TestDecodeRoutes(t *testing.T) {
	tests := []struct {
		name      string
		v         []int16
		positions int
		wantErr   string
	}{
		{"empty", []int16{}, 0, "want [layers, top_k, ids…]"},
		{"zero layers", []int16{0, 1}, 0, "layers and top_k >= 1"},
		{"negative top_k", []int16{1, -1}, 0, "layers and top_k >= 1"},
		{"short", []int16{2, 1, 3}, 1, "1 ids, want 1 positions × 2 layers × top 1 = 2"},
		{"long", []int16{1, 1, 3, 4}, 1, "2 ids, want 1 positions"},
		{"below -1", []int16{1, 2, 3, -2}, 1, "position 0, id 1: -2"},
		{"partly routed", []int16{1, 2, 3, -1}, 1, "position 0, id 1: -1"},
		{"partly not routed", []int16{1, 2, -1, 3}, 1, "position 0, id 1: 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schema.DecodeRoutes(tt.v, tt.positions)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "routed_experts: ") {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func FuzzDecodeRoutes(f *testing.F) {
	f.Add([]byte{2, 0, 1, 0, 3, 0, 4, 0}, 1)
	f.Add([]byte{1, 0, 1, 0, 0xff, 0xff}, 1)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, positions int) {
		positions %= 1 << 16
		v := make([]int16, len(b)/2)
		for i := range v {
			v[i] = int16(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
		r, err := schema.DecodeRoutes(v, positions)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "routed_experts: ") {
				t.Errorf("error does not name the column: %v", err)
			}
			return
		}
		if r.Check() != nil || r.Positions() != positions && r.Width() > 0 && positions > 0 {
			t.Fatalf("routes %+v over %d positions", r, positions)
		}
		if got := schema.EncodeRoutes(r, positions); !slices.Equal(got, v) {
			t.Errorf("EncodeRoutes(DecodeRoutes(v)) = %v, want %v", got, v)
		}
	})
}
