package openai

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

// npy builds a base64 .npy file of the given descr, shape and raw body.
func npy(version byte, header string, body []byte) string {
	b := []byte("\x93NUMPY")
	b = append(b, version, 0)
	if version == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(header)))
	}
	b = append(b, header...)
	return base64.StdEncoding.EncodeToString(append(b, body...))
}

func npyHead(descr string, shape string) string {
	return fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }\n", descr, shape)
}

func TestDecodeNPYRoutes(t *testing.T) {
	const f = "choices[0].routed_experts"
	u16 := binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, 300), 2)
	i4 := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 7), 8)
	tests := []struct {
		name    string
		in      string
		want    *pipeline.Routes
		wantErr string
	}{
		{"uint8", npy(1, npyHead("|u1", "(2, 1, 2)"), []byte{1, 2, 3, 4}), &pipeline.Routes{Layers: 1, TopK: 2, Experts: []int16{1, 2, 3, 4}}, ""},
		{"uint16", npy(1, npyHead("<u2", "(1, 2, 1)"), u16), &pipeline.Routes{Layers: 2, TopK: 1, Experts: []int16{300, 2}}, ""},
		{"int32, version 2", npy(2, npyHead("<i4", "(1, 1, 2)"), i4), &pipeline.Routes{Layers: 1, TopK: 2, Experts: []int16{7, 8}}, ""},
		{"no positions", npy(1, npyHead("|u1", "(0, 4, 2)"), nil), &pipeline.Routes{Layers: 4, TopK: 2, Experts: []int16{}}, ""},
		{"encoder's own", sim.EncodeNPYRoutes(&pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{0, 1, 511, 3}}), &pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{0, 1, 511, 3}}, ""},
		{"not base64", "!!", nil, f + ": not base64"},
		{"not npy", base64.StdEncoding.EncodeToString([]byte("hello world")), nil, f + ": not a .npy array"},
		{"unknown version", npy(9, "{}", nil), nil, f + ": .npy format version 9.0"},
		{"header too long", npy(1, "", nil)[:8] + "AAAA", nil, f},
		{"big endian", npy(1, npyHead(">u2", "(1, 1, 1)"), []byte{0, 1}), nil, `dtype ">u2"`},
		{"float", npy(1, npyHead("<f4", "(1, 1, 1)"), []byte{0, 0, 0, 0}), nil, `dtype "<f4"`},
		{"two dims", npy(1, npyHead("|u1", "(2, 2)"), []byte{1, 2, 3, 4}), nil, "want (positions, layers, top_k)"},
		{"zero layers", npy(1, npyHead("|u1", "(2, 0, 2)"), nil), nil, "layers and top_k must be >= 1"},
		{"short body", npy(1, npyHead("|u1", "(2, 1, 2)"), []byte{1, 2, 3}), nil, "shape [2 1 2] of |u1 does not fit the 3 bytes"},
		{"long body", npy(1, npyHead("|u1", "(1, 1, 2)"), []byte{1, 2, 3}), nil, "shape [1 1 2] of |u1 does not fit the 3 bytes"},
		{"negative id", npy(1, npyHead("<i4", "(1, 1, 1)"), binary.LittleEndian.AppendUint32(nil, 0xffffffff)), nil, f + "[0][0][0]: expert id -1 is out of range"},
		{"fortran", npy(1, "{'descr': '|u1', 'fortran_order': True, 'shape': (1, 1, 1), }", []byte{1}), nil, "fortran_order"},
		{"no shape", npy(1, "{'descr': '|u1', 'fortran_order': False, }", []byte{1}), nil, `no "shape"`},
		{"bad dimension", npy(1, npyHead("|u1", "(x, 1, 1)"), []byte{1}), nil, `"x" is not a dimension`},
		{"huge shape", npy(1, npyHead("|u1", "(2147483648, 2147483648, 2147483648)"), []byte{1}), nil, "does not fit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeNPYRoutes(f, tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Layers != tt.want.Layers || got.TopK != tt.want.TopK || !slices.Equal(got.Experts, tt.want.Experts) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeSGLangRoutes(t *testing.T) {
	enc := func(ids ...int32) string {
		var b []byte
		for _, id := range ids {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	tests := []struct {
		name              string
		in                string
		positions, layers int
		want              *pipeline.Routes
		wantErr           string
	}{
		{"layers known", enc(1, 2, 3, 4, 5, 6, 7, 8), 2, 2, &pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{1, 2, 3, 4, 5, 6, 7, 8}}, ""},
		{"layers unknown", enc(1, 2, 3, 4), 2, 0, &pipeline.Routes{Layers: 1, TopK: 2, Experts: []int16{1, 2, 3, 4}}, ""},
		{"no positions", "", 0, 2, nil, ""},
		{"ids for no position", enc(1), 0, 0, nil, "1 ids for no position"},
		{"not base64", "@", 1, 0, nil, "meta_info.routed_experts: not base64"},
		{"not int32", base64.StdEncoding.EncodeToString([]byte{1, 2, 3}), 1, 0, nil, "3 bytes are not whole int32 ids"},
		{"not per position", enc(1, 2, 3), 2, 0, nil, "3 ids are not a whole number per position over 2 positions"},
		{"empty for positions", "", 2, 0, nil, "0 ids are not a whole number"},
		{"not per layer", enc(1, 2, 3), 1, 2, nil, "3 ids per position are not a whole number per layer of generate.routed_experts_layers 2"},
		{"out of range", enc(1, 40000), 1, 0, nil, "meta_info.routed_experts[1]: expert id 40000 (position 0) is out of range"},
		{"encoder's own", sim.EncodeSGLangRoutes(&pipeline.Routes{Layers: 1, TopK: 3, Experts: []int16{9, 8, 7}}), 1, 1, &pipeline.Routes{Layers: 1, TopK: 3, Experts: []int16{9, 8, 7}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeSGLangRoutes(tt.in, tt.positions, tt.layers)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if got != nil {
					t.Fatalf("got %+v, want nil", got)
				}
				return
			}
			if got.Layers != tt.want.Layers || got.TopK != tt.want.TopK || !slices.Equal(got.Experts, tt.want.Experts) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDecodeRoutesInAnswers reads routes in whole answers of both
// protocols: asked for, not asked for, absent, and more positions than
// the request has.
func TestDecodeRoutesInAnswers(t *testing.T) {
	routes := &pipeline.Routes{Layers: 2, TopK: 1, Experts: []int16{1, 2, 3, 4, 5, 6}} // 3 positions
	vllm := func(r string) []byte {
		return []byte(`{"choices":[{"text":"x","finish_reason":"stop","token_ids":[7,8],"routed_experts":` + r + `}],"usage":{"prompt_tokens":2,"completion_tokens":2}}`)
	}
	sgl := func(r string) []byte {
		return []byte(`{"text":"x","output_ids":[7,8],"meta_info":{"id":"a","finish_reason":{"type":"stop"},"prompt_tokens":2,"completion_tokens":2,"output_token_logprobs":[[-0.1,7,null],[-0.2,8,null]],"routed_experts":` + r + `}}`)
	}
	ask := &inference.Request{PromptTokenIDs: []int32{1, 2}, RoutedExperts: true, RoutedExpertsLayers: 2}
	short := &inference.Request{PromptTokenIDs: []int32{1}, RoutedExperts: true}
	long := &inference.Request{PromptTokenIDs: []int32{1, 2, 3}, RoutedExperts: true}
	npyR, sglR := `"`+sim.EncodeNPYRoutes(routes)+`"`, `"`+sim.EncodeSGLangRoutes(routes)+`"`
	tests := []struct {
		name    string
		decode  func() (*inference.Response, error)
		want    bool
		wantErr string
	}{
		{"vllm asked", func() (*inference.Response, error) { return decodeOpenAI(vllm(npyR), ask) }, true, ""},
		{"vllm not asked", func() (*inference.Response, error) { return decodeOpenAI(vllm(npyR), nil) }, false, ""},
		{"vllm none", func() (*inference.Response, error) { return decodeOpenAI(vllm("null"), ask) }, false, ""},
		{"vllm too many positions", func() (*inference.Response, error) { return decodeOpenAI(vllm(npyR), short) }, false, "choices[0].routed_experts: 3 positions, the prompt (1 tokens) and the answer (2) have 2 routed"},
		{"vllm other layers", func() (*inference.Response, error) {
			return decodeOpenAI(vllm(npyR), &inference.Request{PromptTokenIDs: []int32{1, 2}, RoutedExperts: true, RoutedExpertsLayers: 3})
		}, false, "2 layers, generate.routed_experts_layers is 3"},
		{"vllm malformed", func() (*inference.Response, error) { return decodeOpenAI(vllm(`"AAAA"`), ask) }, false, "choices[0].routed_experts: not a .npy array"},
		{"sglang asked", func() (*inference.Response, error) { return decodeSGLangFor(sgl(sglR), ask) }, true, ""},
		{"sglang not asked", func() (*inference.Response, error) { return decodeSGLangFor(sgl(sglR), nil) }, false, ""},
		{"sglang none", func() (*inference.Response, error) { return decodeSGLangFor(sgl("null"), ask) }, false, ""},
		{"sglang wrong count", func() (*inference.Response, error) { return decodeSGLangFor(sgl(sglR), long) }, false, "6 ids are not a whole number per position over 4 positions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.decode()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (resp.Routes != nil) != tt.want {
				t.Fatalf("Routes = %+v, want present %v", resp.Routes, tt.want)
			}
			if tt.want && (resp.Routes.Layers != 2 || !slices.Equal(resp.Routes.Experts, routes.Experts)) {
				t.Errorf("Routes = %+v, want %+v", resp.Routes, routes)
			}
		})
	}
}

func FuzzDecodeNPYRoutes(f *testing.F) {
	f.Add(sim.EncodeNPYRoutes(&pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{0, 1, 2, 3}}))
	f.Add(sim.EncodeNPYRoutes(&pipeline.Routes{Layers: 1, TopK: 1, Experts: []int16{1000}}))
	f.Add(npy(2, npyHead("<i4", "(1, 1, 1)"), []byte{1, 0, 0, 0}))
	f.Add(npy(1, npyHead("|u1", "(3,"), nil))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeNPYRoutes("f", s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f") {
				t.Errorf("error does not name the field: %v", err)
			}
			return
		}
		if err := r.Check(); err != nil {
			t.Errorf("decoded routes of a bad shape: %v", err)
		}
		for _, e := range r.Experts {
			if e < 0 {
				t.Errorf("negative expert id %d", e)
			}
		}
	})
}

func FuzzDecodeSGLangRoutes(f *testing.F) {
	f.Add(sim.EncodeSGLangRoutes(&pipeline.Routes{Layers: 2, TopK: 2, Experts: []int16{0, 1, 2, 3}}), 1, 2)
	f.Add("AAAAAA==", 1, 0)
	f.Add("", 0, 0)
	f.Fuzz(func(t *testing.T, s string, positions, layers int) {
		positions, layers = positions%1000, layers%100
		r, err := decodeSGLangRoutes(s, positions, layers)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "meta_info.routed_experts") {
				t.Errorf("error does not name the field: %v", err)
			}
			return
		}
		if r == nil {
			return
		}
		if err := r.Check(); err != nil || r.Positions() != positions {
			t.Errorf("routes %d positions (want %d), check: %v", r.Positions(), positions, err)
		}
	})
}
