package client

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
)

// TestAckBodyAsMarshalled: the ack body written directly is the body
// encoding/json writes of the same fields, byte for byte, for rows empty,
// long, and holding -0, NaN and the smallest and largest float32.
func TestAckBodyAsMarshalled(t *testing.T) {
	long := make([]float32, 1000)
	for i := range long {
		long[i] = -float32(i) / 7
	}
	for _, rows := range [][][]float32{
		nil,
		{},
		{{}},
		{{-0.5}, {}, long},
		{{float32(math.Copysign(0, -1)), float32(math.NaN()), math.SmallestNonzeroFloat32, -math.MaxFloat32}},
	} {
		strs := make([]string, len(rows))
		for i, row := range rows {
			b := make([]byte, 4*len(row))
			for j, v := range row {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
			}
			strs[i] = base64.StdEncoding.EncodeToString(b)
		}
		want, err := json.Marshal(struct {
			Step        int64    `json:"step"`
			LogprobsF32 []string `json:"logprobs_f32"`
		}{42, strs})
		if err != nil {
			t.Fatal(err)
		}
		if got := ackBody(42, rows); !bytes.Equal(got, want) {
			t.Fatalf("%d rows: ackBody\n%s\nencoding/json\n%s", len(rows), got, want)
		}
	}
}
