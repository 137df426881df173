package inference_test

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/inference"
)

// Token ids of a toy Qwen-like template.
const (
	imStart int32 = 1000 + iota
	imEnd
	nl
	roleUser
	roleAsst
	thinkOpen
	thinkClose
)

func TestObservationDelta(t *testing.T) {
	prefix := []int32{imStart, roleUser, nl, 7, 8, imEnd, nl, imStart, roleAsst, nl}
	reply := []int32{50, 51, 52}
	obs := []int32{imStart, roleUser, nl, 60, 61, imEnd, nl, imStart, roleAsst, nl}
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	emptyThink := []int32{thinkOpen, nl, nl, thinkClose, nl, nl}
	tests := []struct {
		name          string
		without, with []int32
		last          int32
		closing       []int32
		want          []int32
		err           bool
	}{
		{"prefix-stable, closing newline kept", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), imEnd, nil, cat([]int32{nl}, obs), false},
		{"end-of-turn is the last token", cat(prefix, reply, []int32{imEnd}), cat(prefix, reply, []int32{imEnd}, obs), imEnd, nil, obs, false},
		{"no end-of-turn generated", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), -1, nil, obs, false},
		{"Qwen3: empty think dropped once a user follows", cat(prefix, emptyThink, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), imEnd, nil, cat([]int32{nl}, obs), false},
		{"reply rendered with extra tokens later", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, []int32{99, 98}, reply, []int32{imEnd, nl}, obs), imEnd, nil, cat([]int32{nl}, obs), false},
		{"cut reply gets the whole closing", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), 52, []int32{imEnd, nl}, cat([]int32{imEnd, nl}, obs), false},
		{"cut reply ending with the closing's second token", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), nl, []int32{imEnd, nl}, cat([]int32{imEnd, nl}, obs), false},
		{"empty reply gets the whole closing", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), -1, []int32{imEnd, nl}, cat([]int32{imEnd, nl}, obs), false},
		{"Qwen3 realigned, cut reply", cat(prefix, emptyThink, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), 51, []int32{imEnd, nl}, cat([]int32{imEnd, nl}, obs), false},
		{"finished reply with a known closing", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, reply, []int32{imEnd, nl}, obs), imEnd, []int32{imEnd, nl}, cat([]int32{nl}, obs), false},
		{"cannot align", cat(prefix, reply, []int32{imEnd, nl}), cat(prefix, []int32{1, 2, 3}), imEnd, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := inference.ObservationDelta(tt.without, tt.with, tt.last, tt.closing)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if !tt.err && !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// ids reads int32s (small, so that collisions happen) from fuzz bytes.
func ids(b []byte, base int32) []int32 {
	var out []int32
	for len(b) >= 2 {
		out = append(out, base+int32(binary.LittleEndian.Uint16(b)%16))
		b = b[2:]
	}
	return out
}

// FuzzObservationDelta checks, for any input, that the delta is a suffix
// of with and that nothing panics; and for inputs built as a template
// would render them (a shared prefix, a fixed reply re-rendered with a
// dropped or added block, a closing, new tokens), that the delta is
// exactly the closing's unseen part followed by the new tokens.
func FuzzObservationDelta(f *testing.F) {
	f.Add([]byte{1, 0, 2, 0}, []byte{3, 0}, []byte{9, 0, 9, 0}, []byte{4, 0, 5, 0}, uint8(1), true)
	f.Add([]byte{}, []byte{}, []byte{}, []byte{}, uint8(0), false)
	f.Fuzz(func(t *testing.T, pre, dropped, added, news []byte, closeLen uint8, eot bool) {
		p := ids(pre, 0)
		d := ids(dropped, 100)
		a := ids(added, 200)
		n := ids(news, 0)
		reply := []int32{500, 501, 502} // the fixed reply: ids no other part uses
		closing := []int32{600}         // the end-of-turn token
		for i := 0; i < int(closeLen%3); i++ {
			closing = append(closing, 700+int32(i))
		}
		without := slices.Concat(p, d, reply, closing)
		with := slices.Concat(p, a, reply, closing, n)
		if len(a) > 64 {
			a = a[:64]
			with = slices.Concat(p, a, reply, closing, n)
		}
		last := int32(-1)
		if eot {
			last = 600
		}
		got, err := inference.ObservationDelta(without, with, last, nil)
		if err != nil {
			if len(d) == 0 || len(a) == 0 {
				t.Fatalf("aligned renderings not aligned: %v", err)
			}
			// d and a both non-empty may share a first token by chance;
			// any other failure is a bug.
			t.Fatalf("unexpected error %v (dropped %v, added %v)", err, d, a)
		}
		want := n
		if eot {
			want = slices.Concat(closing[1:], n)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("delta %v, want %v\nwithout %v\nwith    %v", got, want, without, with)
		}

		// With the closing known, a cut reply gets all of it.
		if !eot {
			got, err := inference.ObservationDelta(without, with, 501, closing)
			if err != nil || !slices.Equal(got, slices.Concat(closing, n)) {
				t.Fatalf("cut reply: delta %v, %v; want %v", got, err, slices.Concat(closing, n))
			}
		}

		// Arbitrary inputs: no panic.
		x, y := ids(pre, 0), ids(news, 0)
		if got, err := inference.ObservationDelta(x, y, int32(closeLen%16), x[len(x)/2:]); err == nil {
			if len(got) > len(y)+len(x) {
				t.Fatalf("delta %v longer than its inputs", got)
			}
		}
	})
}
