package metrics

import "math/bits"

// Histogram layout: values below exactBuckets have a bucket each; larger
// values share log-linear buckets, subBuckets per power of two, so that a
// bucket's width is at most 1/subBuckets of its lower bound.
const (
	exactBuckets = 256
	subBuckets   = 128
)

// bucketOf returns the histogram bucket of v >= 0.
func bucketOf(v int64) int {
	if v < exactBuckets {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - 8 // v>>shift is in [128, 255]
	return exactBuckets + (shift-1)*subBuckets + int(v>>shift) - subBuckets
}

// bucketMax returns the largest value of bucket i.
func bucketMax(i int) int64 {
	if i < exactBuckets {
		return int64(i)
	}
	shift := (i-exactBuckets)/subBuckets + 1
	m := int64((i-exactBuckets)%subBuckets + subBuckets)
	return (m+1)<<shift - 1
}

// dist accumulates a distribution of non-negative integers in constant
// memory: count, sum, max and a log-linear histogram for quantiles.
type dist struct {
	n, sum, max int64
	buckets     []int64
}

func (d *dist) add(v int64) {
	if v < 0 {
		v = 0
	}
	d.n++
	d.sum += v
	d.max = max(d.max, v)
	b := bucketOf(v)
	if b >= len(d.buckets) {
		d.buckets = append(d.buckets, make([]int64, b+1-len(d.buckets))...)
	}
	d.buckets[b]++
}

// quantile returns the nearest-rank q-quantile: the smallest bucket bound x
// such that at least ceil(q·n) values are <= x, capped at the maximum.
// Exact for values below 256, within 1/128 relative above.
func (d *dist) quantile(q float64) int64 {
	if d.n == 0 {
		return 0
	}
	rank := int64(q * float64(d.n))
	if float64(rank) < q*float64(d.n) {
		rank++
	}
	rank = max(rank, 1)
	var cum int64
	for i, c := range d.buckets {
		cum += c
		if cum >= rank {
			return min(bucketMax(i), d.max)
		}
	}
	return d.max
}

func (d *dist) result() Dist {
	return Dist{Total: d.sum, Mean: ratio(d.sum, d.n), Max: d.max, P95: d.quantile(0.95)}
}
