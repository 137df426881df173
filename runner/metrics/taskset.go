package metrics

import "slices"

// taskSet is a set of taskKeys in about one bit a key when the keys are
// dense (task indices are source row numbers): keys are grouped by their
// high 48 bits into chunks of 65,536, each a sorted array of the low 16
// bits while it holds at most arrayMax keys, a bitmap after.
type taskSet struct {
	chunks map[uint64]*setChunk
	n      int64
}

type setChunk struct {
	arr  []uint16
	bits *[1 << 10]uint64 // 65,536 bits; set once arr would exceed arrayMax
}

// arrayMax is where an array chunk (2 bytes a key) becomes as large as a
// bitmap (8 KiB).
const arrayMax = 4096

// add inserts k and reports whether it was absent.
func (s *taskSet) add(k taskKey) bool {
	if s.chunks == nil {
		s.chunks = map[uint64]*setChunk{}
	}
	hi, lo := uint64(k)>>16, uint16(k)
	c := s.chunks[hi]
	if c == nil {
		c = &setChunk{}
		s.chunks[hi] = c
	}
	if c.bits != nil {
		w, b := lo>>6, uint64(1)<<(lo&63)
		if c.bits[w]&b != 0 {
			return false
		}
		c.bits[w] |= b
		s.n++
		return true
	}
	i, found := slices.BinarySearch(c.arr, lo)
	if found {
		return false
	}
	if len(c.arr) < arrayMax {
		c.arr = slices.Insert(c.arr, i, lo)
	} else {
		c.bits = new([1 << 10]uint64)
		for _, v := range c.arr {
			c.bits[v>>6] |= 1 << (v & 63)
		}
		c.bits[lo>>6] |= 1 << (lo & 63)
		c.arr = nil
	}
	s.n++
	return true
}

// has reports whether k is in the set.
func (s *taskSet) has(k taskKey) bool {
	c := s.chunks[uint64(k)>>16]
	if c == nil {
		return false
	}
	lo := uint16(k)
	if c.bits != nil {
		return c.bits[lo>>6]&(1<<(lo&63)) != 0
	}
	_, found := slices.BinarySearch(c.arr, lo)
	return found
}
