package pipeline

import "fmt"

// NotRouted is the expert id of a position the engine never routed (an
// observation no later prompt carried, the last generated token): every
// one of the position's Layers×TopK entries holds it.
const NotRouted int16 = -1

// Routes are the experts a mixture-of-experts engine routed positions of
// a token sequence to, as inference engines report them for router replay
// (vLLM's choices[].routed_experts, SGLang's meta_info.routed_experts).
type Routes struct {
	// Layers is the number of MoE layers and TopK the experts each layer
	// picks per token.
	Layers, TopK int
	// Experts holds Layers×TopK expert ids per position, position-major
	// then layer-major: position p, layer l, choice k is at
	// (p×Layers+l)×TopK+k. A position not routed holds NotRouted
	// throughout.
	Experts []int16
}

// Width is the number of expert ids per position, Layers×TopK.
func (r *Routes) Width() int { return r.Layers * r.TopK }

// Positions is the number of positions r covers.
func (r *Routes) Positions() int {
	if r == nil || r.Width() == 0 {
		return 0
	}
	return len(r.Experts) / r.Width()
}

// At returns the expert ids of position p (Layers×TopK, layer-major), or
// nil when p is past r; a position not routed gives NotRouted ids.
func (r *Routes) At(p int) []int16 {
	if r == nil || p < 0 || p >= r.Positions() {
		return nil
	}
	w := r.Width()
	return r.Experts[p*w : (p+1)*w : (p+1)*w]
}

// Routed reports whether position p was routed.
func (r *Routes) Routed(p int) bool {
	e := r.At(p)
	return len(e) > 0 && e[0] != NotRouted
}

// Check reports a shape that does not hold: Layers or TopK below 1, or
// Experts not a whole number of positions.
func (r *Routes) Check() error {
	if r.Layers < 1 || r.TopK < 1 {
		return fmt.Errorf("routes: layers %d, top_k %d: want both >= 1", r.Layers, r.TopK)
	}
	if len(r.Experts)%r.Width() != 0 {
		return fmt.Errorf("routes: %d expert ids are not a whole number of positions of %d×%d", len(r.Experts), r.Layers, r.TopK)
	}
	return nil
}

// Merge lays the routes of one answer, src, which cover the positions
// offset, offset+1, … of r's sequence, over dst, and returns the result:
// a position dst already routed keeps its experts (an engine routes a
// prompt's prefix again on every turn; the first routing of a position is
// the one its tokens were generated or first read under), the others take
// src's, and positions between dst's end and offset are marked not
// routed. dst may be nil. dst's Experts are never written: the result
// shares none that it changed, so a caller may keep dst to go back to.
// Shapes that differ are an error.
func (dst *Routes) Merge(src *Routes, offset int) (*Routes, error) {
	if src == nil {
		return dst, nil
	}
	if err := src.Check(); err != nil {
		return dst, err
	}
	if offset < 0 {
		return dst, fmt.Errorf("routes: offset %d is negative", offset)
	}
	if dst == nil {
		dst = &Routes{Layers: src.Layers, TopK: src.TopK}
	} else if dst.Layers != src.Layers || dst.TopK != src.TopK {
		return dst, fmt.Errorf("routes: an answer's routes are %d layers × top %d, earlier answers' %d × %d", src.Layers, src.TopK, dst.Layers, dst.TopK)
	}
	w := dst.Width()
	have, n := dst.Positions(), src.Positions()
	end := max(have, offset+n)
	// Usually every position before have is routed already (an answer
	// routes its whole prompt): the new positions are appended, dst's
	// own left as they are. Filling a gap before have takes a copy.
	gap := false
	for p := offset; p < min(have, offset+n); p++ {
		if !dst.Routed(p) {
			gap = true
			break
		}
	}
	out := &Routes{Layers: dst.Layers, TopK: dst.TopK, Experts: dst.Experts[:have*w]}
	if gap {
		out.Experts = append(make([]int16, 0, end*w), dst.Experts[:have*w]...)
	}
	for p := have; p < end; p++ {
		if j := p - offset; j >= 0 && j < n {
			out.Experts = append(out.Experts, src.Experts[j*w:(j+1)*w]...)
			continue
		}
		for range w {
			out.Experts = append(out.Experts, NotRouted)
		}
	}
	for j := range n {
		if p := offset + j; p < have && !dst.Routed(p) {
			copy(out.Experts[p*w:(p+1)*w], src.Experts[j*w:(j+1)*w])
		}
	}
	return out, nil
}

// Cut returns r cut to its first n positions (r itself when it holds no
// more; nil when n is 0).
func (r *Routes) Cut(n int) *Routes {
	if r == nil || r.Positions() <= n {
		return r
	}
	if n <= 0 {
		return nil
	}
	w := r.Width()
	return &Routes{Layers: r.Layers, TopK: r.TopK, Experts: r.Experts[: n*w : n*w]}
}
