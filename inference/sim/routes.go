package sim

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// MoE is the shape of a simulated mixture-of-experts model: Layers MoE
// layers, each routing a token to TopK distinct experts of Experts. The
// router is deterministic (Route): the experts of a position depend on
// the server's seed, the layer, the position and its token id alone, so a
// test recomputes them, and a prompt's prefix routes the same on every
// turn, as a prefix cache keeps it.
type MoE struct {
	// Layers is the number of MoE layers (0: a dense model, no routes).
	Layers int `yaml:"layers"`
	// Experts is the number of experts of each layer (at most 32768).
	Experts int `yaml:"experts"`
	// TopK is the number of distinct experts a layer routes a token to
	// (1 to experts).
	TopK int `yaml:"top_k"`
}

// On reports whether the model is a mixture of experts.
func (m MoE) On() bool { return m.Layers > 0 }

// Check reports a shape that does not hold.
func (m MoE) Check() error {
	if m.Layers == 0 && m.Experts == 0 && m.TopK == 0 {
		return nil
	}
	if m.Layers < 1 || m.TopK < 1 || m.Experts < m.TopK || m.Experts > math.MaxInt16+1 {
		return fmt.Errorf("moe: layers %d, experts %d, top_k %d: want layers >= 1 and 1 <= top_k <= experts <= %d", m.Layers, m.Experts, m.TopK, math.MaxInt16+1)
	}
	return nil
}

// Route appends to dst the experts the simulated router sends token id at
// position pos to, with the server seed seed: for each layer, TopK
// distinct experts, layer-major (as pipeline.Routes holds them).
func (m MoE) Route(dst []int16, seed int64, pos int, id int32) []int16 {
	// One key a position, one mix a layer and one a draw: cheap, so that
	// the simulator's own CPU does not stand in for trajflow's when a
	// benchmark asks for the routes of millions of tokens.
	base := key(uint64(seed), domRoute, uint64(pos), uint64(uint32(id)))
	for l := range m.Layers {
		layer := mix(base ^ (uint64(l)+1)*0x9e3779b97f4a7c15)
		start := len(dst)
		for j := uint64(0); len(dst)-start < m.TopK; j++ {
			e := int16(mix(layer+j) % uint64(m.Experts))
			dup := false
			for _, x := range dst[start:] {
				if x == e {
					dup = true
					break
				}
			}
			if !dup {
				dst = append(dst, e)
			}
		}
	}
	return dst
}

// Routes are the routes of every position of ids but the last (the
// engines never run the last sampled token through the model).
func (m MoE) Routes(seed int64, ids []int32) *pipeline.Routes {
	r := &pipeline.Routes{Layers: m.Layers, TopK: m.TopK}
	for p := 0; p < len(ids)-1; p++ {
		r.Experts = m.Route(r.Experts, seed, p, ids[p])
	}
	return r
}

// EncodeNPYRoutes encodes r as vLLM's choices[].routed_experts: the
// base64 of a .npy file of shape (positions, layers, top_k), uint8 when
// every id fits (256 experts or fewer), uint16 otherwise.
func EncodeNPYRoutes(r *pipeline.Routes) string {
	small := true
	for _, e := range r.Experts {
		if e > math.MaxUint8 {
			small = false
		}
	}
	descr := "|u1"
	if !small {
		descr = "<u2"
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d, %d), }", descr, r.Positions(), r.Layers, r.TopK)
	// numpy pads the header with spaces and a newline to a multiple of 64.
	header += strings.Repeat(" ", (64-(10+len(header)+1)%64)%64) + "\n"
	size := 1
	if !small {
		size = 2
	}
	b := make([]byte, 0, 10+len(header)+size*len(r.Experts))
	b = append(b, "\x93NUMPY\x01\x00"...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	b = append(b, header...)
	for _, e := range r.Experts {
		if small {
			b = append(b, byte(e))
		} else {
			b = binary.LittleEndian.AppendUint16(b, uint16(e))
		}
	}
	return base64.StdEncoding.EncodeToString(b)
}

// EncodeSGLangRoutes encodes r as SGLang's meta_info.routed_experts: the
// base64 of its ids as little-endian int32, with no shape.
func EncodeSGLangRoutes(r *pipeline.Routes) string {
	b := make([]byte, 4*len(r.Experts))
	for i, e := range r.Experts {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(e)))
	}
	return base64.StdEncoding.EncodeToString(b)
}
