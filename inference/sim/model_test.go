package sim

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// runUntilIdle advances m event by event and returns the time it went idle.
func runUntilIdle(t *testing.T, m *model) float64 {
	t.Helper()
	last := 0.0
	for i := 0; ; i++ {
		tn, ok := m.next()
		if !ok {
			return last
		}
		if i > 1e6 {
			t.Fatal("model does not go idle")
		}
		m.advance(tn)
		last = tn
	}
}

func TestModelSingleRequestLatency(t *testing.T) {
	const a, c, p = 0.010, 0.001, 0.0001
	for _, tc := range []struct{ prompt, tokens int }{{100, 5}, {0, 1}, {7, 300}} {
		m := newModel(a, c, p, 4)
		j := newJob(tc.prompt, tc.tokens)
		m.arrive(2, j)
		runUntilIdle(t, m)
		want := 2 + float64(tc.tokens)*(a+c) + p*float64(tc.prompt)
		if !j.finished || !near(j.doneAt, want) {
			t.Errorf("P=%d L=%d: done at %.9f (finished %v), want L·(a+c)+p·P = %.9f", tc.prompt, tc.tokens, j.doneAt, j.finished, want)
		}
		if m.steps != int64(tc.tokens) || m.decoded != int64(tc.tokens) || m.prompts != int64(tc.prompt) {
			t.Errorf("steps %d decoded %d prompts %d", m.steps, m.decoded, m.prompts)
		}
		if !near(m.busy, want-2) {
			t.Errorf("busy %.9f, want %.9f", m.busy, want-2)
		}
	}
}

func TestModelBatching(t *testing.T) {
	const a, c, p = 0.010, 0.001, 0.0001
	const B = 4
	m := newModel(a, c, p, B)
	jobs := make([]*job, 6)
	for i := range jobs {
		jobs[i] = newJob(10, 3)
		m.arrive(0, jobs[i]) // all at once: the first B share the first step
	}
	if len(m.run) != B || len(m.queue) != 2 {
		t.Fatalf("running %d queued %d, want %d and 2", len(m.run), len(m.queue), B)
	}
	runUntilIdle(t, m)
	first := (a + B*c + B*10*p) + 2*(a+B*c)
	second := first + (a + 2*c + 2*10*p) + 2*(a+2*c)
	for i, j := range jobs {
		want := first
		if i >= B {
			want = second
		}
		if !near(j.doneAt, want) {
			t.Errorf("job %d done at %.9f, want %.9f", i, j.doneAt, want)
		}
	}
	if m.steps != 6 || m.decoded != 18 {
		t.Errorf("steps %d decoded %d, want 6 and 18", m.steps, m.decoded)
	}
	if mean := float64(m.decoded) / float64(m.steps); mean != 3 {
		t.Errorf("mean batch %g, want 3", mean)
	}
}

func TestModelArrivalJoinsAtNextBoundary(t *testing.T) {
	const a, c, p = 0.010, 0.002, 0.001
	m := newModel(a, c, p, 8)
	j1 := newJob(0, 10)
	m.arrive(0, j1)
	dt1 := a + c // one running
	// Arrives in the middle of the third step: joins at its end.
	at := 2.5 * dt1
	m.advance(at)
	j2 := newJob(5, 2)
	m.arrive(at, j2)
	runUntilIdle(t, m)
	join := 3 * dt1
	dt2 := a + 2*c
	wantJ2 := join + (dt2 + 5*p) + dt2
	if !near(j2.doneAt, wantJ2) {
		t.Errorf("j2 done at %.9f, want %.9f", j2.doneAt, wantJ2)
	}
	// j1: 3 steps alone, 2 shared, 5 alone again.
	wantJ1 := wantJ2 + 5*dt1
	if !near(j1.doneAt, wantJ1) {
		t.Errorf("j1 done at %.9f, want %.9f", j1.doneAt, wantJ1)
	}
}

func TestModelFullBatchWaitsForSlot(t *testing.T) {
	const a, c = 0.010, 0.001
	m := newModel(a, c, 0, 1)
	j1, j2 := newJob(0, 4), newJob(0, 2)
	m.arrive(0, j1)
	m.advance(0.001)
	m.arrive(0.001, j2)
	runUntilIdle(t, m)
	if !near(j1.doneAt, 4*(a+c)) || !near(j2.doneAt, 6*(a+c)) {
		t.Errorf("done at %.9f and %.9f, want %.9f and %.9f", j1.doneAt, j2.doneAt, 4*(a+c), 6*(a+c))
	}
}

func TestModelCancel(t *testing.T) {
	const a, c = 0.010, 0.001
	m := newModel(a, c, 0, 2)
	long, short, queued := newJob(0, 100), newJob(0, 10), newJob(0, 1)
	m.arrive(0, long)
	m.arrive(0, short)
	m.arrive(0, queued)
	// A queued request leaves at once.
	m.cancel(0.001, queued)
	if !queued.cancelled || len(m.queue) != 0 {
		t.Fatal("queued request not removed")
	}
	select {
	case <-queued.done:
	default:
		t.Fatal("queued request's done not closed")
	}
	// A running request leaves at the end of the step in progress.
	dt2 := a + 2*c
	at := 1.5 * dt2
	m.advance(at)
	m.cancel(at, long)
	if len(m.run) != 2 {
		t.Fatalf("running %d before the boundary, want 2", len(m.run))
	}
	m.advance(2 * dt2)
	if len(m.run) != 1 || !long.cancelled || long.finished {
		t.Fatalf("running %d after the boundary; long cancelled %v finished %v", len(m.run), long.cancelled, long.finished)
	}
	runUntilIdle(t, m)
	// short: 2 steps shared, 8 alone (faster).
	want := 2*dt2 + 8*(a+c)
	if !near(short.doneAt, want) {
		t.Errorf("short done at %.9f, want %.9f", short.doneAt, want)
	}
	if m.cancelled != 2 || m.completed != 1 {
		t.Errorf("cancelled %d completed %d, want 2 and 1", m.cancelled, m.completed)
	}
}
