package harness

import (
	"context"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"sort"
	"strconv"
	"sync"
	"time"

	envsim "github.com/trajflow/trajflow/envs/sim"
)

// Turn is one generation of a trajectory as the simulator answered it.
type Turn struct {
	// Prompt is the prompt tokens the server prefilled; Decode the tokens
	// it generated (one per batch step).
	Prompt, Decode int
	// EnvDelay is the environment step after this turn, from the trailer
	// (already multiplied by the time scale).
	EnvDelay time.Duration
}

// Traj is one trajectory: its turns in order and its outcome.
type Traj struct {
	TaskIndex int64
	Attempt   int
	Seed      int64
	Turns     []Turn
	// Correct is the last turn's trailer verdict (the sim env's reward).
	Correct bool
	// Finished is true once a reply said no turns are left.
	Finished bool
}

// DecodeTokens is the trajectory's generated tokens over all turns.
func (t *Traj) DecodeTokens() int64 {
	var d int64
	for _, u := range t.Turns {
		d += int64(u.Decode)
	}
	return d
}

// Recorder is an inference.Client that passes every request to an inner client
// and records, per trajectory, what each reply cost (usage and the sim
// trailer), and the time of the first request. It keys trajectories by the
// request's affinity (trajflow's group id "t<task>-a<attempt>") and seed.
type Recorder struct {
	inner inference.Client

	mu    sync.Mutex
	first time.Time
	last  time.Time
	calls []time.Duration // start of each call, since first
	trajs map[trajKey]*Traj
	fails int64
}

type trajKey struct {
	group string
	seed  int64
}

var _ inference.Client = (*Recorder)(nil)

// NewRecorder wraps inner.
func NewRecorder(inner inference.Client) *Recorder {
	return &Recorder{inner: inner, trajs: map[trajKey]*Traj{}}
}

// Complete implements inference.Client.
func (r *Recorder) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	r.mu.Lock()
	now := time.Now()
	if r.first.IsZero() {
		r.first = now
	}
	r.calls = append(r.calls, now.Sub(r.first))
	r.mu.Unlock()
	resp, err := r.inner.Complete(ctx, req)
	if err != nil {
		if ctx.Err() == nil {
			r.mu.Lock()
			r.fails++
			r.mu.Unlock()
		}
		return resp, err
	}
	seed, _ := toInt64(req.Params["seed"])
	turn := Turn{Prompt: resp.PromptTokens, Decode: resp.CompletionTokens}
	tr, terr := envsim.ReadTrailer(resp.Extra)
	turn.EnvDelay = time.Duration(tr.EnvDelayMs * float64(time.Millisecond))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = time.Now()
	k := trajKey{req.Affinity, seed}
	t := r.trajs[k]
	if t == nil {
		t = &Traj{Seed: seed}
		t.TaskIndex, t.Attempt = parseGroupID(req.Affinity)
		r.trajs[k] = t
	}
	t.Turns = append(t.Turns, turn)
	if terr == nil {
		t.Correct = tr.Correct
		t.Finished = tr.TurnsLeft == 0
	}
	return resp, nil
}

// First is the time of the first request (zero before any).
func (r *Recorder) First() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// Last is the time the last successful reply arrived.
func (r *Recorder) Last() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Calls is the number of requests made.
func (r *Recorder) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// CallAt is when the k-th request (0-based) started, after the first; -1
// when fewer were made.
func (r *Recorder) CallAt(k int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k >= len(r.calls) {
		return -1
	}
	return r.calls[k]
}

// Failures is the number of requests that returned an error (not
// counting requests whose context was cancelled).
func (r *Recorder) Failures() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fails
}

// Trajs returns the recorded trajectories ordered by task, attempt, seed.
func (r *Recorder) Trajs() []*Traj {
	r.mu.Lock()
	out := make([]*Traj, 0, len(r.trajs))
	for _, t := range r.trajs {
		out = append(out, t)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.TaskIndex != b.TaskIndex {
			return a.TaskIndex < b.TaskIndex
		}
		if a.Attempt != b.Attempt {
			return a.Attempt < b.Attempt
		}
		return a.Seed < b.Seed
	})
	return out
}

// parseGroupID reads trajflow's group id "t<task>-a<attempt>"; -1 when it
// has another shape.
func parseGroupID(id string) (task int64, attempt int) {
	var t, a int64
	if _, err := fmt.Sscanf(id, "t%d-a%d", &t, &a); err != nil {
		return -1, -1
	}
	return t, int(a)
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}
