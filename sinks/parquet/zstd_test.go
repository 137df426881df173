package parquet

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// The sink's zstd encoder costs a few MiB once, for the Writer's life, and
// nothing per page: a klauspost/compress release that allocated a history
// or a block buffer per EncodeAll would show here (100 pages of 256 KiB
// would allocate over 25 MiB). BENCHMARKS.md has the figures.
func TestZstdEncoderMemoryIsBounded(t *testing.T) {
	var page bytes.Buffer
	for i := 0; page.Len() < 256<<10; i++ {
		fmt.Fprintf(&page, `{"role":"assistant","content":"the answer is %d","token_ids":[%d,%d,%d]}`, i*7919%1000, i, i*3, i*11)
	}
	src := page.Bytes()
	dst := make([]byte, 0, len(src))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := newZstdCodec()
	for range 100 {
		var err error
		if dst, err = c.Encode(dst, src); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	if len(dst) == 0 || len(dst) >= len(src) {
		t.Fatalf("page of %d bytes compressed to %d", len(src), len(dst))
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("the encoder and 100 pages of %d KiB: %.2f MiB allocated", len(src)>>10, float64(alloc)/(1<<20))
	if alloc > 8<<20 {
		t.Fatalf("the encoder and 100 pages allocated %.1f MiB, want at most 8 MiB", float64(alloc)/(1<<20))
	}
	got, err := c.Decode(nil, dst)
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("round trip: %v (equal %v)", err, bytes.Equal(got, src))
	}
}
