package gateway

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	cases := []struct {
		name     string
		obs      []time.Duration
		p50, p99 time.Duration // the true quantiles: the summary is within one bucket (+19%) above
		mean     time.Duration
	}{
		{"empty", nil, 0, 0, 0},
		{"one", []time.Duration{100 * time.Microsecond}, 100 * time.Microsecond, 100 * time.Microsecond, 100 * time.Microsecond},
		{"zero and negative", []time.Duration{0, -5}, 0, 0, 0},
		{"spread", func() []time.Duration {
			var d []time.Duration
			for i := 1; i <= 100; i++ {
				d = append(d, time.Duration(i)*time.Millisecond)
			}
			return d
		}(), 50 * time.Millisecond, 99 * time.Millisecond, 50500 * time.Microsecond},
		{"huge", []time.Duration{time.Hour}, bucketBound(nBuckets - 1), bucketBound(nBuckets - 1), time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			for _, d := range tc.obs {
				h.observe(d)
			}
			s := h.summary()
			if s.Count != int64(len(tc.obs)) || s.Mean != tc.mean {
				t.Errorf("count %d mean %v", s.Count, s.Mean)
			}
			within := func(got, want time.Duration) bool {
				if want <= time.Microsecond {
					return got <= time.Microsecond
				}
				return got >= want && float64(got) <= float64(want)*1.19
			}
			if len(tc.obs) > 0 && (!within(s.P50, tc.p50) || !within(s.P99, tc.p99)) {
				t.Errorf("p50 %v (true %v), p99 %v (true %v)", s.P50, tc.p50, s.P99, tc.p99)
			}
		})
	}
}
