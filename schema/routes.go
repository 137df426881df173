package schema

import (
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// The routed_experts column (version 7) holds a row's routes
// (pipeline.Rollout.Routes) as one list of int16:
//
//	[layers, top_k, e_0, e_1, …]
//
// with layers × top_k expert ids per position of prompt_token_ids ++
// response_token_ids, every position of the row, position-major then
// layer-major: position p, layer l, choice k is element
// 2 + (p·layers + l)·top_k + k. A position the engine never routed holds
// pipeline.NotRouted (-1) throughout. A row without routes is null. In
// numpy: a = np.asarray(row); L, K = a[0], a[1]; e = a[2:].reshape(-1, L,
// K); routed = e[:, 0, 0] >= 0.

// RoutesHeader is the number of elements before the expert ids: layers
// and top_k.
const RoutesHeader = 2

// EncodeRoutes is the routed_experts value of routes over a row of
// positions positions: nil for nil routes; positions past the routes
// (and any they hold past positions are dropped) are not routed.
func EncodeRoutes(r *pipeline.Routes, positions int) []int16 {
	if r == nil {
		return nil
	}
	w := r.Width()
	out := make([]int16, RoutesHeader+positions*w)
	out[0], out[1] = int16(r.Layers), int16(r.TopK)
	n := copy(out[RoutesHeader:], r.Experts[:min(len(r.Experts), positions*w)])
	for i := RoutesHeader + n; i < len(out); i++ {
		out[i] = pipeline.NotRouted
	}
	return out
}

// DecodeRoutes reads a routed_experts value over a row of positions
// positions (nil gives nil). A header that is not two counts of at least
// 1, a length that is not positions × layers × top_k ids after it, or an
// id below -1, or a position partly routed, is an error naming the
// column.
func DecodeRoutes(v []int16, positions int) (*pipeline.Routes, error) {
	if v == nil {
		return nil, nil
	}
	if len(v) < RoutesHeader || v[0] < 1 || v[1] < 1 {
		return nil, fmt.Errorf("routed_experts: want [layers, top_k, ids…] with layers and top_k >= 1, got %d elements starting %v", len(v), v[:min(len(v), RoutesHeader)])
	}
	r := &pipeline.Routes{Layers: int(v[0]), TopK: int(v[1])}
	w := r.Width()
	if len(v)-RoutesHeader != positions*w {
		return nil, fmt.Errorf("routed_experts: %d ids, want %d positions × %d layers × top %d = %d", len(v)-RoutesHeader, positions, r.Layers, r.TopK, positions*w)
	}
	r.Experts = v[RoutesHeader:len(v):len(v)]
	for p := range positions {
		e := r.Experts[p*w : (p+1)*w]
		for k, id := range e {
			if id < pipeline.NotRouted || (id == pipeline.NotRouted) != (e[0] == pipeline.NotRouted) {
				return nil, fmt.Errorf("routed_experts: position %d, id %d: %d (a position holds expert ids >= 0, or -1 throughout)", p, k, id)
			}
		}
	}
	return r, nil
}
