package openai

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// bodyGate bounds the bytes of large response bodies held at once.
type bodyGate struct {
	sem  *semaphore.Weighted
	max  int64
	held atomic.Int64 // bytes acquired now
	peak atomic.Int64 // the most held at once
}

func newBodyGate(max int64) *bodyGate {
	return &bodyGate{sem: semaphore.NewWeighted(max), max: max}
}

// acquire waits until n bytes (at most the whole bound) are free and
// returns the function giving them back.
func (g *bodyGate) acquire(ctx context.Context, n int64) (release func(), err error) {
	n = min(n, g.max)
	if err := g.sem.Acquire(ctx, n); err != nil {
		return func() {}, err
	}
	h := g.held.Add(n)
	for p := g.peak.Load(); h > p && !g.peak.CompareAndSwap(p, h); p = g.peak.Load() {
	}
	return func() {
		g.held.Add(-n)
		g.sem.Release(n)
	}, nil
}

// maxPooledBuffer is the largest response buffer kept for reuse.
const maxPooledBuffer = 4 << 20
