package loop_test

import (
	"context"
	"fmt"
	"github.com/trajflow/trajflow/inference"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/loop"
)

// echoModel answers every request at once with the turn number; requests
// of the task named in slow wait on the release channel first.
type echoModel struct {
	slow    int64
	release chan struct{}
	calls   atomic.Int64
}

func (m *echoModel) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	m.calls.Add(1)
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == pipeline.RoleAssistant {
			turn++
		}
	}
	if m.release != nil && req.Affinity == fmt.Sprintf("t%d", m.slow) {
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &inference.Response{
		Message:          pipeline.Message{Role: pipeline.RoleAssistant, Content: strconv.Itoa(turn + 1), TokenIDs: []int32{int32(turn)}},
		FinishReason:     "stop",
		CompletionTokens: 1,
	}, nil
}

// turnsEnv ends a trajectory after `turns` steps, rewarding 1 per step, and
// records the order in which trajectories finish.
type turnsEnv struct {
	turns int
	mu    sync.Mutex
	order []int64
}

func (e *turnsEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{State: 0}, nil
}

func (e *turnsEnv) Step(_ context.Context, r *pipeline.Rollout, _ pipeline.Message) (*envs.Step, error) {
	n := r.State.(int) + 1
	done := n >= e.turns
	if done {
		e.mu.Lock()
		e.order = append(e.order, r.Task.Index)
		e.mu.Unlock()
	}
	return &envs.Step{
		Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: "go on"}},
		Reward:       1, Terminated: done, State: n,
	}, nil
}

func rollouts(n int) []*pipeline.Rollout {
	out := make([]*pipeline.Rollout, n)
	for i := range out {
		t := &pipeline.Task{Index: int64(i), Messages: []pipeline.Message{{Role: "user", Content: "hi"}}}
		out[i] = &pipeline.Rollout{Task: t, GroupSize: 1, GroupID: fmt.Sprintf("t%d", i), Messages: t.Messages}
	}
	return out
}

// run pushes rs through a loop and returns what came out.
func run(t *testing.T, ctx context.Context, model inference.Client, env envs.Env, maxTurns int, opts loop.Options, rs []*pipeline.Rollout, onLoop func(*loop.Loop)) ([]*pipeline.Rollout, error) {
	t.Helper()
	g := pipeline.NewGraph()
	src := pipeline.NewSource(g, "src", 0, func(ctx context.Context, emit func(*pipeline.Rollout) error) error {
		for _, r := range rs {
			if err := emit(r); err != nil {
				return err
			}
		}
		return nil
	})
	l := loop.New(g, "loop", mustGen(model), envstep.New(env, "test", envstep.Limits{MaxTurns: maxTurns}), opts)
	if onLoop != nil {
		onLoop(l)
	}
	var out []*pipeline.Rollout
	src.Via(l).To(pipeline.NewSink(g, "out", 0, func(_ context.Context, r *pipeline.Rollout) error {
		out = append(out, r)
		return nil
	}, nil))
	err := g.Run(ctx)
	return out, err
}

func TestNoDeadlockAtAnySize(t *testing.T) {
	defer leak.Check(t)()
	tests := []loop.Options{
		{GenWorkers: 1, EnvWorkers: 1, MaxInflight: 1},
		{GenWorkers: 1, EnvWorkers: 1},
		{GenWorkers: 1, EnvWorkers: 8, MaxInflight: 2},
		{GenWorkers: 8, EnvWorkers: 1, MaxInflight: 64},
		{GenWorkers: 3, EnvWorkers: 2, MaxInflight: 100},
	}
	for _, opts := range tests {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			env := &turnsEnv{turns: 12}
			out, err := run(t, context.Background(), &echoModel{}, env, 20, opts, rollouts(40), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 40 {
				t.Fatalf("%d rollouts out, want 40", len(out))
			}
			for _, r := range out {
				if r.Status != pipeline.StatusOK || r.NumTurns != 12 || r.Reward != 12 || !r.Terminated {
					t.Fatalf("%s: status %s turns %d reward %g", r, r.Status, r.NumTurns, r.Reward)
				}
				// prompt + 12 × (assistant + observation)
				if len(r.Messages) != 1+2*12 {
					t.Fatalf("%s: %d messages", r, len(r.Messages))
				}
			}
		})
	}
}

func TestNoBarrier(t *testing.T) {
	defer leak.Check(t)()
	// Task 0's first generation is held until every other trajectory has
	// finished all its turns: with a per-turn barrier they could not.
	model := &echoModel{slow: 0, release: make(chan struct{})}
	env := &turnsEnv{turns: 5}
	rs := rollouts(10)
	var l *loop.Loop
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			env.mu.Lock()
			n := len(env.order)
			env.mu.Unlock()
			if n == 9 {
				close(model.release)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	out, err := run(t, context.Background(), model, env, 5, loop.Options{GenWorkers: 4, EnvWorkers: 2}, rs, func(x *loop.Loop) { l = x })
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 10 || l.Admitted() != 10 {
		t.Fatalf("%d out, %d admitted", len(out), l.Admitted())
	}
	if last := env.order[len(env.order)-1]; last != 0 {
		t.Fatalf("finish order %v: the slow trajectory should finish last", env.order)
	}
}

func TestStopCancelsEverythingInside(t *testing.T) {
	defer leak.Check(t)()
	model := &echoModel{slow: 3, release: make(chan struct{})} // never released
	env := &turnsEnv{turns: 3}
	var l *loop.Loop
	built := make(chan struct{})
	go func() {
		<-built
		for l.Admitted() < 10 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		l.Stop()
	}()
	out, err := run(t, context.Background(), model, env, 3, loop.Options{GenWorkers: 4, EnvWorkers: 2, MaxInflight: 100}, rollouts(10), func(x *loop.Loop) { l = x; close(built) })
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 10 {
		t.Fatalf("%d rollouts out, want every one of 10", len(out))
	}
	var cancelled int
	for _, r := range out {
		if r.Status == pipeline.StatusCancelled {
			cancelled++
		} else if r.Status != pipeline.StatusOK {
			t.Fatalf("%s: status %s", r, r.Status)
		}
	}
	if cancelled == 0 {
		t.Fatal("the held trajectory should be cancelled")
	}
	if l.Inside() != 0 {
		t.Fatalf("%d inside after the end", l.Inside())
	}
}

func TestTrajectoryTimeout(t *testing.T) {
	defer leak.Check(t)()
	model := &echoModel{slow: 1, release: make(chan struct{})}
	out, err := run(t, context.Background(), model, &turnsEnv{turns: 2}, 2,
		loop.Options{GenWorkers: 2, EnvWorkers: 1, Timeout: 50 * time.Millisecond}, rollouts(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		want := pipeline.StatusOK
		if r.Task.Index == 1 {
			want = pipeline.StatusError
		}
		if r.Status != want {
			t.Fatalf("%s: status %s (%s), want %s", r, r.Status, r.Error, want)
		}
	}
}

func TestInterruptLeavesNothingRunning(t *testing.T) {
	defer leak.Check(t)()
	model := &echoModel{slow: 0, release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := run(t, ctx, model, &turnsEnv{turns: 2}, 2, loop.Options{GenWorkers: 1, EnvWorkers: 1}, rollouts(5), nil)
	if err == nil {
		t.Fatal("want the context's error")
	}
}

// flakyModel fails the first `failures` calls of every trajectory's first
// try with a server error.
type flakyModel struct {
	failures int
	mu       sync.Mutex
	seen     map[string]int
}

func (m *flakyModel) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	m.mu.Lock()
	key := fmt.Sprint(req.Affinity, req.Params["seed"])
	m.seen[key]++
	n := m.seen[key]
	m.mu.Unlock()
	if n <= m.failures && req.Params["seed"] == int64(0) {
		return nil, &inference.Error{Class: inference.ClassServer, Status: 500, Msg: "down"}
	}
	return &inference.Response{Message: pipeline.Message{Content: "ok"}, FinishReason: "stop"}, nil
}

func TestFailedSampleRetriedOnItsOwn(t *testing.T) {
	defer leak.Check(t)()
	for _, retries := range []int{0, 1, 3} {
		t.Run(fmt.Sprint("retries ", retries), func(t *testing.T) {
			model := &flakyModel{failures: 1, seen: map[string]int{}}
			renew := func(r *pipeline.Rollout) *pipeline.Rollout {
				return &pipeline.Rollout{Task: r.Task, GroupSize: 1, GroupID: r.GroupID, Seed: r.Seed + 1000, Messages: r.Task.Messages}
			}
			out, err := run(t, context.Background(), model, &turnsEnv{turns: 1}, 1,
				loop.Options{GenWorkers: 2, EnvWorkers: 1, MaxInflight: 1, SampleRetries: retries, Renew: renew}, rollouts(4), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 4 {
				t.Fatalf("%d out", len(out))
			}
			for _, r := range out {
				want, tries := pipeline.StatusOK, 1
				if retries == 0 {
					want, tries = pipeline.StatusError, 0
				}
				if r.Status != want || r.Retries != tries {
					t.Fatalf("%s: status %s after %d retries", r, r.Status, r.Retries)
				}
			}
		})
	}
}

// instantEnv ends every trajectory at its first step.
type instantEnv struct{}

func (instantEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) { return nil, nil }

func (instantEnv) Step(context.Context, *pipeline.Rollout, pipeline.Message) (*envs.Step, error) {
	return &envs.Step{Reward: 1, Terminated: true}, nil
}

// instantModel answers at once with a fixed response.
type instantModel struct{ resp *inference.Response }

func (m instantModel) Complete(context.Context, *inference.Request) (*inference.Response, error) {
	return m.resp, nil
}

// BenchmarkLoop is the loop's own cost per single-turn rollout (admission,
// reset, generation, step, hand-over between the workers) with a model
// and an environment that answer at once, at the overhead benchmark's 64
// generation and 64 environment workers.
func BenchmarkLoop(b *testing.B) {
	model := instantModel{&inference.Response{
		Message: pipeline.Message{Role: pipeline.RoleAssistant, Content: "1"}, FinishReason: "stop", CompletionTokens: 1,
	}}
	task := &pipeline.Task{Messages: []pipeline.Message{{Role: "user", Content: "hi"}}}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	g := pipeline.NewGraph()
	src := pipeline.NewSource(g, "src", 16, func(ctx context.Context, emit func(*pipeline.Rollout) error) error {
		for range b.N {
			if err := emit(&pipeline.Rollout{Task: task, GroupSize: 1, GroupID: "t", Messages: task.Messages}); err != nil {
				return err
			}
		}
		return nil
	})
	l := loop.New(g, "loop", mustGen(model), envstep.New(instantEnv{}, "test", envstep.Limits{MaxTurns: 1}),
		loop.Options{GenWorkers: 64, EnvWorkers: 64, Buffer: 64})
	n := 0
	src.Via(l).To(pipeline.NewSink(g, "out", 16, func(_ context.Context, r *pipeline.Rollout) error {
		n++
		return nil
	}, nil))
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	if n != b.N {
		b.Fatalf("%d rollouts out, want %d", n, b.N)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mustGen(c inference.Client) *generate.Generator {
	g, err := generate.New(c, generate.Options{Model: "m"})
	if err != nil {
		panic(err)
	}
	return g
}
