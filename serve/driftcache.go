package serve

import (
	"slices"
	"sync"
)

// driftCacheSteps is how many steps' engine rows the drift cache holds at
// most: a trainer acks a step before it takes many more, and a step
// acked goes at once.
const driftCacheSteps = 4

// driftCache holds, per group of a step made after an ack first carried
// logprobs, the engine's side of its rows (engineRows), taken from the
// records the step's file is written from, in the background: an ack
// with the trainer's logprobs then compares at once, without reading the
// step's file back. A step not held (made before, a restart, a replay)
// is read from its file as before. It is safe for concurrent use.
type driftCache struct {
	mu    sync.Mutex
	used  bool
	steps map[int64]map[groupRef]engineRows
	order []int64 // the steps held, oldest first
}

// use notes that acks carry logprobs: the steps made from now on are
// held.
func (c *driftCache) use() {
	c.mu.Lock()
	c.used = true
	c.mu.Unlock()
}

// wanted reports whether acks carry logprobs.
func (c *driftCache) wanted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// put holds step n's groups' engine rows, the oldest step held going
// when there are driftCacheSteps; a group whose records lack the
// training view is not held (the ack reads the file and says why).
func (c *driftCache) put(n int64, groups []*group) {
	rows := make(map[groupRef]engineRows, len(groups))
	for _, g := range groups {
		var e engineRows
		ok := true
		for _, rec := range g.recs {
			if err := e.addRecord(rec); err != nil {
				ok = false
				break
			}
		}
		if ok {
			rows[g.ref] = e
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps == nil {
		c.steps = map[int64]map[groupRef]engineRows{}
	}
	c.steps[n] = rows
	c.order = append(c.order, n)
	for len(c.order) > driftCacheSteps {
		delete(c.steps, c.order[0])
		c.order = c.order[1:]
	}
}

// get returns the engine rows of step st's groups in keep (nil: all), in
// the order of the step's file (its groups' order), and whether every
// one of them is held.
func (c *driftCache) get(st *stepState, keep map[groupRef]bool) (engineRows, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := c.steps[st.Step]
	var out engineRows
	if held == nil {
		return out, false
	}
	for _, ref := range st.Groups {
		if keep != nil && !keep[ref] {
			continue
		}
		e, ok := held[ref]
		if !ok {
			return engineRows{}, false
		}
		out.logprobs = append(out.logprobs, e.logprobs...)
		out.versions = append(out.versions, e.versions...)
	}
	return out, true
}

// drop forgets step n (acked: no ack of it compares again).
func (c *driftCache) drop(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.steps, n)
	c.order = slices.DeleteFunc(c.order, func(m int64) bool { return m == n })
}
