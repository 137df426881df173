package sim

import (
	"math"
	"sort"
)

// job is one request inside the batching model.
type job struct {
	prompt    int // prompt tokens, paid at admission
	remaining int // tokens still to emit
	cancelled bool
	// aborted: Server.AbortAll took it out; it answers with what it
	// generated.
	aborted  bool
	tokens   int // tokens it was to emit
	running  bool
	finished bool
	// priority orders the waiting queue and chooses whom to preempt, as
	// vLLM's priority scheduling does: lower values first, then earlier
	// arrivals (seq).
	priority int
	seq      int64
	// preemptions counts how often it was taken out of the batch; a
	// preempted job recomputes its prompt and the tokens it generated
	// when it is admitted again.
	preemptions int
	// done is closed when the job leaves the model (finished or cancelled).
	done chan struct{}
	// doneAt is the simulated time it left.
	doneAt float64
}

func newJob(prompt, tokens int) *job {
	if tokens < 1 {
		tokens = 1
	}
	return &job{prompt: prompt, remaining: tokens, tokens: tokens, done: make(chan struct{})}
}

// emitted is the number of tokens j generated.
func (j *job) emitted() int { return j.tokens - max(j.remaining, 0) }

// model is the continuous-batching core. It holds no clock: every call
// takes the simulated time t (seconds) at which it happens, and times only
// move forward. It is not safe for concurrent use.
//
// Between events the running set is constant, so the model keeps one
// segment: it started at the step boundary t0, its first step lasts dt1
// (which pays for the prompts admitted at t0) and every later step dt.
type model struct {
	a, c, p  float64 // seconds
	capacity int

	run   []*job
	queue []*job
	t0    float64
	dt1   float64
	dt    float64
	// segPrompt is the prompt tokens admitted at t0.
	segPrompt int
	// stopK, when > 0, ends the segment after that many steps (a request
	// arrived or left, so the batch changes at that boundary).
	stopK int

	// arrivals numbers the jobs in arrival order (job.seq).
	arrivals int64

	steps   int64
	decoded int64
	prompts int64
	// preempted counts preemptions; recomputed the tokens prefilled again
	// on resuming (also counted in prompts).
	preempted  int64
	recomputed int64
	busy       float64
	completed  int64
	cancelled  int64
}

func newModel(a, c, p float64, capacity int) *model {
	return &model{a: a, c: c, p: p, capacity: capacity}
}

const timeEps = 1e-9

// segmentSteps is how many steps the current segment runs before the
// batch changes.
func (m *model) segmentSteps() int {
	k := math.MaxInt
	for _, j := range m.run {
		if j.remaining < k {
			k = j.remaining
		}
	}
	if m.stopK > 0 && m.stopK < k {
		k = m.stopK
	}
	return k
}

// next returns when the batch changes next; false when idle.
func (m *model) next() (float64, bool) {
	if len(m.run) == 0 {
		return 0, false
	}
	k := m.segmentSteps()
	return m.t0 + m.dt1 + float64(k-1)*m.dt, true
}

// advance runs the model up to time t and returns the jobs that left it
// (their done channels are closed).
func (m *model) advance(t float64) []*job {
	var out []*job
	for {
		tn, ok := m.next()
		if !ok || tn > t+timeEps {
			return out
		}
		k := m.segmentSteps()
		m.steps += int64(k)
		m.decoded += int64(k * len(m.run))
		m.busy += tn - m.t0
		kept := m.run[:0]
		for _, j := range m.run {
			j.remaining -= k
			switch {
			case j.remaining <= 0:
				j.finished = true
				m.completed++
			case j.cancelled:
				m.cancelled++
			default:
				kept = append(kept, j)
				continue
			}
			j.running = false
			j.doneAt = tn
			close(j.done)
			out = append(out, j)
		}
		clear(m.run[len(kept):])
		m.run = kept
		m.t0 = tn
		m.stopK = 0
		m.segPrompt = 0
		m.admit()
	}
}

// admit moves queued jobs into the running set at the boundary t0 and
// plans the next segment. The queue is ordered by (priority, arrival); with
// the batch full, a waiting job of strictly higher priority (a lower
// value) preempts the running job that vLLM's priority policy would
// preempt: the one of the largest (priority, arrival). The preempted job
// goes back to the queue in its place and, when admitted again, pays the
// prefill of its prompt and of every token it generated (vLLM V1
// recomputes rather than swaps).
func (m *model) admit() {
	for len(m.queue) > 0 {
		j := m.queue[0]
		if len(m.run) >= m.capacity {
			v := m.victim()
			if v < 0 || !before(j, m.run[v]) {
				break
			}
			m.preempt(v)
			continue
		}
		m.queue[0] = nil
		m.queue = m.queue[1:]
		j.running = true
		cost := j.prompt
		if j.preemptions > 0 {
			cost += j.emitted()
			m.recomputed += int64(cost)
		}
		m.segPrompt += cost
		m.prompts += int64(cost)
		m.run = append(m.run, j)
	}
	if len(m.queue) == 0 {
		m.queue = nil
	}
	m.dt = m.a + m.c*float64(len(m.run))
	m.dt1 = m.dt + m.p*float64(m.segPrompt)
}

// before reports whether a goes before b: a lower priority value, or the
// same and an earlier arrival.
func before(a, b *job) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.seq < b.seq
}

// victim is the index in the running set of the job to preempt: the last
// in (priority, arrival) order; -1 when none runs. A job cancelled in the
// step just ended is already gone.
func (m *model) victim() int {
	v := -1
	for i, j := range m.run {
		if v < 0 || before(m.run[v], j) {
			v = i
		}
	}
	return v
}

// preempt takes the running job at index i out of the batch and queues it
// again in (priority, arrival) order.
func (m *model) preempt(i int) {
	j := m.run[i]
	m.run = append(m.run[:i], m.run[i+1:]...)
	j.running = false
	j.preemptions++
	m.preempted++
	m.enqueue(j)
}

// enqueue puts j in the queue in (priority, arrival) order.
func (m *model) enqueue(j *job) {
	i := sort.Search(len(m.queue), func(k int) bool { return before(j, m.queue[k]) })
	m.queue = append(m.queue, nil)
	copy(m.queue[i+1:], m.queue[i:])
	m.queue[i] = j
}

// stopAtBoundary ends the segment at the step boundary that closes the step
// in progress at t.
func (m *model) stopAtBoundary(t float64) {
	k := 1
	if t > m.t0+m.dt1 && m.dt > 0 {
		k = 1 + int(math.Ceil((t-m.t0-m.dt1)/m.dt-timeEps))
	}
	if k < 1 {
		k = 1
	}
	if m.stopK == 0 || k < m.stopK {
		m.stopK = k
	}
}

// arrive queues j at time t (the caller advanced the model to t). An idle
// model starts a step at once, and a request arriving at the very instant a
// step starts joins it; otherwise j is admitted at the next step boundary,
// or when a slot frees if the batch is full.
func (m *model) arrive(t float64, j *job) {
	m.arrivals++
	j.seq = m.arrivals
	m.enqueue(j)
	switch {
	case len(m.run) == 0:
		m.t0 = t
		m.stopK = 0
		m.segPrompt = 0
		m.admit()
	case len(m.run) < m.capacity && t <= m.t0+timeEps:
		m.admit()
	case len(m.run) < m.capacity:
		m.stopAtBoundary(t)
	case m.queue[0] == j && before(j, m.run[m.victim()]):
		// The batch is full, and j preempts a running job at the next
		// step boundary.
		m.stopAtBoundary(t)
	}
}

// cancel takes j out at time t: at once from the queue, at the next step
// boundary from the running set.
func (m *model) cancel(t float64, j *job) {
	if j.finished || j.cancelled {
		return
	}
	if !j.running {
		for i, q := range m.queue {
			if q == j {
				m.queue = append(m.queue[:i], m.queue[i+1:]...)
				j.cancelled = true
				m.cancelled++
				j.doneAt = t
				close(j.done)
				return
			}
		}
		return
	}
	j.cancelled = true
	m.stopAtBoundary(t)
}
