package client

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestAckF32: the raw ack body is every row's values, in order, as
// little-endian float32 with nothing between them (the service splits
// them by the rows it answered), bit for bit: -0, NaN and the extremes
// included; empty rows add nothing.
func TestAckF32(t *testing.T) {
	long := make([]float32, 1000)
	for i := range long {
		long[i] = -float32(i) / 7
	}
	for _, rows := range [][][]float32{
		nil,
		{{}},
		{{-0.5}, {}, long},
		{{float32(math.Copysign(0, -1)), float32(math.NaN()), math.SmallestNonzeroFloat32, -math.MaxFloat32}},
	} {
		var want []float32
		for _, row := range rows {
			want = append(want, row...)
		}
		body := ackF32(rows)
		if body.contentType != ContentTypeF32 || len(body.b) != 4*len(want) {
			t.Fatalf("%d rows: %q, %d bytes; want %s, %d bytes", len(rows), body.contentType, len(body.b), ContentTypeF32, 4*len(want))
		}
		for i, v := range want {
			if got := binary.LittleEndian.Uint32(body.b[4*i:]); got != math.Float32bits(v) {
				t.Fatalf("%d rows: value %d is %#x, want %#x", len(rows), i, got, math.Float32bits(v))
			}
		}
	}
}
