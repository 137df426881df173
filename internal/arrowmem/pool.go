package arrowmem

import (
	"math/bits"
	"sync"

	"github.com/apache/arrow/go/v17/arrow/memory"
)

// Size classes are powers of two from 1<<minShift to 1<<maxShift bytes;
// larger requests bypass the pool.
const (
	minShift = 6 // 64 bytes: Arrow's alignment
	maxShift = 26
)

// DefaultRetain is the most bytes a Pool made by New keeps for reuse.
const DefaultRetain = 32 << 20

// Pool is a memory.Allocator that keeps freed buffers for reuse, up to a
// bound. Every buffer it hands out is zeroed (as Go's allocator's are) and
// 64-byte aligned. It is safe for concurrent use.
type Pool struct {
	mu       sync.Mutex
	free     [maxShift + 1][][]byte
	retained int // bytes in free
	limit    int
}

var _ memory.Allocator = (*Pool)(nil)

// New returns a Pool that keeps at most retain bytes of freed buffers
// (DefaultRetain when retain <= 0).
func New(retain int) *Pool {
	if retain <= 0 {
		retain = DefaultRetain
	}
	return &Pool{limit: retain}
}

// class returns the size class of n bytes, or -1 when n is above the
// largest class.
func class(n int) int {
	if n <= 1<<minShift {
		return minShift
	}
	c := bits.Len(uint(n - 1))
	if c > maxShift {
		return -1
	}
	return c
}

// Allocate returns a zeroed buffer of size bytes.
func (p *Pool) Allocate(size int) []byte {
	c := class(size)
	if c < 0 {
		return memory.DefaultAllocator.Allocate(size)
	}
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.retained -= cap(b)
		p.mu.Unlock()
		clear(b)
		return b[:size]
	}
	p.mu.Unlock()
	// Go aligns power-of-two allocations of 64 bytes and more to at
	// least 64 bytes.
	return make([]byte, size, 1<<c)
}

// Reallocate grows or shrinks b to size bytes, keeping its contents.
func (p *Pool) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free returns b for reuse. Buffers the Pool did not hand out, and those
// beyond its bound, are left to the garbage collector.
func (p *Pool) Free(b []byte) {
	n := cap(b)
	if n < 1<<minShift || n > 1<<maxShift || n&(n-1) != 0 {
		return
	}
	c := bits.Len(uint(n)) - 1
	p.mu.Lock()
	if p.retained+n <= p.limit {
		p.free[c] = append(p.free[c], b[:n])
		p.retained += n
	}
	p.mu.Unlock()
}

// Retained returns the bytes of freed buffers kept for reuse.
func (p *Pool) Retained() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retained
}
