package harness

import "container/heap"

// batchModel is the simulator's batching model with a zero-overhead
// client, the engine of FIFO and FirstKept: requests arrive at their
// times (arrive), wait in the client's line in arrival order, enter the
// server while fewer than conc are in it (conc ≤ 0: no bound), and the
// server admits from its FIFO queue at step boundaries up to B running;
// a step costs a + c·|R| + p·(prompt tokens admitted in it) and decodes
// one token of every running request.
type batchModel struct {
	c        Cost
	conc     int
	t        float64 // seconds
	arrivals arrivalHeap
	waiting  []*modelReq // client side, in order
	queue    []*modelReq // server side, FIFO
	running  []*modelReq
	inServer int
	seq      int
}

// modelReq is one turn's request in the model; g is the caller's (a
// group index, or 0).
type modelReq struct {
	g, traj, turn, remaining, prompt int
}

func newBatchModel(c Cost, conc int) *batchModel { return &batchModel{c: c, conc: conc} }

// arrive schedules turn of trajectory traj to be sent at time at
// (seconds); arrivals at equal times keep the order of their calls.
func (m *batchModel) arrive(at float64, traj, turn int) {
	heap.Push(&m.arrivals, arrival{at: at, seq: m.seq, traj: traj, turn: turn})
	m.seq++
}

// step runs the model through its next batch step. Arrivals now due are
// turned into requests by req (nil: dropped) and join the client's line;
// when nothing is in the server the clock first jumps to the next
// arrival. It returns the requests whose last token the step decoded, in
// the running order, and how many ran in it; ok is false, and nothing
// ran, when nothing is in the server and nothing is left to arrive.
func (m *batchModel) step(req func(arrival) *modelReq) (finished []*modelReq, ran int, ok bool) {
	for {
		for m.arrivals.Len() > 0 && m.arrivals[0].at <= m.t+1e-12 {
			if r := req(heap.Pop(&m.arrivals).(arrival)); r != nil {
				m.waiting = append(m.waiting, r)
			}
		}
		for len(m.waiting) > 0 && (m.conc <= 0 || m.inServer < m.conc) {
			m.queue = append(m.queue, m.waiting[0])
			m.waiting = m.waiting[1:]
			m.inServer++
		}
		if len(m.running) > 0 || len(m.queue) > 0 {
			break
		}
		if m.arrivals.Len() == 0 {
			return nil, 0, false
		}
		m.t = m.arrivals[0].at
	}
	prompt := 0
	for len(m.queue) > 0 && len(m.running) < m.c.B {
		prompt += m.queue[0].prompt
		m.running = append(m.running, m.queue[0])
		m.queue = m.queue[1:]
	}
	m.t += m.c.A + m.c.C*float64(len(m.running)) + m.c.P*float64(prompt)
	ran = len(m.running)
	kept := m.running[:0]
	for _, r := range m.running {
		r.remaining--
		if r.remaining > 0 {
			kept = append(kept, r)
			continue
		}
		m.inServer--
		finished = append(finished, r)
	}
	m.running = kept
	return finished, ran, true
}

// remove takes the requests gone says out of the client's line and the
// server (they leave it at once, as a cancel does).
func (m *batchModel) remove(gone func(*modelReq) bool) {
	keep := func(rs []*modelReq, inServer bool) []*modelReq {
		k := rs[:0]
		for _, r := range rs {
			if !gone(r) {
				k = append(k, r)
			} else if inServer {
				m.inServer--
			}
		}
		return k
	}
	m.waiting = keep(m.waiting, false)
	m.queue = keep(m.queue, true)
	m.running = keep(m.running, true)
}
