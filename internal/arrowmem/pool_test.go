package arrowmem

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

func TestClass(t *testing.T) {
	tests := []struct{ n, want int }{
		{0, 6}, {1, 6}, {64, 6}, {65, 7}, {128, 7}, {129, 8}, {4096, 12}, {4097, 13}, {1 << 26, 26}, {1<<26 + 1, -1},
	}
	for _, tt := range tests {
		if got := class(tt.n); got != tt.want {
			t.Errorf("class(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

func TestReuseZeroedAligned(t *testing.T) {
	p := New(1 << 20)
	b := p.Allocate(100)
	if len(b) != 100 || cap(b) != 128 {
		t.Fatalf("len %d cap %d, want 100 128", len(b), cap(b))
	}
	for i := range b {
		b[i] = 0xff
	}
	p.Free(b)
	if p.Retained() != 128 {
		t.Fatalf("retained %d, want 128", p.Retained())
	}
	c := p.Allocate(120)
	if &c[0] != &b[0] {
		t.Fatal("a freed buffer of the same class was not reused")
	}
	for i, v := range c[:cap(c)] {
		if v != 0 {
			t.Fatalf("reused buffer byte %d = %#x, want 0", i, v)
		}
	}
	for _, n := range []int{1, 64, 65, 1000, 5000, 70000} {
		if a := uintptr(unsafe.Pointer(&p.Allocate(n)[0])); a%64 != 0 {
			t.Errorf("Allocate(%d) at %#x: not 64-byte aligned", n, a)
		}
	}
	if big := p.Allocate(1<<26 + 1); len(big) != 1<<26+1 {
		t.Fatalf("large allocation len %d", len(big))
	}
}

func TestReallocateKeepsContents(t *testing.T) {
	p := New(0)
	b := p.Allocate(10)
	copy(b, "0123456789")
	b = p.Reallocate(100, b)
	if string(b[:10]) != "0123456789" || len(b) != 100 {
		t.Fatalf("after growing: %q len %d", b[:10], len(b))
	}
	if p.Retained() != 64 {
		t.Fatalf("the old buffer was not freed: retained %d", p.Retained())
	}
	if s := p.Reallocate(20, b); len(s) != 20 || &s[0] != &b[0] {
		t.Fatal("shrinking moved the buffer")
	}
}

func TestBound(t *testing.T) {
	p := New(1000)
	bufs := make([][]byte, 20)
	for i := range bufs {
		bufs[i] = p.Allocate(100)
	}
	for _, b := range bufs {
		p.Free(b)
	}
	if p.Retained() > 1000 || p.Retained() != 7*128 {
		t.Fatalf("retained %d, want %d", p.Retained(), 7*128)
	}
	p.Free(make([]byte, 100)) // not the pool's: cap 100 is no class
	p.Free(nil)
	if p.Retained() != 7*128 {
		t.Fatalf("foreign buffers kept: retained %d", p.Retained())
	}
}

// Arrow builders and arrays work on the pool, from several goroutines, and
// give all memory back.
func TestArrowRoundTrip(t *testing.T) {
	p := New(0)
	checked := memory.NewCheckedAllocator(p)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				b := array.NewRecordBuilder(checked, arrow.NewSchema([]arrow.Field{
					{Name: "s", Type: arrow.BinaryTypes.String},
					{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
				}, nil))
				sb := b.Field(0).(*array.StringBuilder)
				lb := b.Field(1).(*array.ListBuilder)
				vb := lb.ValueBuilder().(*array.Int32Builder)
				for i := range 200 {
					sb.Append("row")
					lb.Append(true)
					vb.AppendValues([]int32{int32(g), int32(round), int32(i)}, nil)
				}
				rec := b.NewRecord()
				b.Release()
				l := rec.Column(1).(*array.List)
				if s, e := l.ValueOffsets(199); e-s != 3 || l.ListValues().(*array.Int32).Value(int(s)+2) != 199 {
					t.Errorf("row 199: offsets %d..%d", s, e)
				}
				if rec.Column(0).(*array.String).Value(7) != "row" {
					t.Error("string column")
				}
				rec.Release()
			}
		}()
	}
	wg.Wait()
	checked.AssertSize(t, 0)
	if p.Retained() == 0 {
		t.Fatal("nothing was returned to the pool")
	}
}

func BenchmarkAllocateFree(b *testing.B) {
	p := New(0)
	b.ReportAllocs()
	for b.Loop() {
		p.Free(p.Allocate(3000))
	}
}
