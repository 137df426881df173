package loop

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reugn/go-streams"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"golang.org/x/sync/errgroup"
)

// Options size the loop.
type Options struct {
	// GenWorkers is the number of generations in flight (LLM slots).
	GenWorkers int
	// EnvWorkers is the number of environment calls in flight (env slots).
	EnvWorkers int
	// MaxInflight bounds the trajectories inside the loop; default
	// GenWorkers + EnvWorkers.
	MaxInflight int
	// Timeout bounds one trajectory from admission; 0: none.
	Timeout time.Duration
	// TimeoutOf, when set, is a trajectory's own timeout (its environment
	// route's) in place of Timeout; 0: none.
	TimeoutOf func(r *pipeline.Rollout) time.Duration
	// Buffer is the output channel's size.
	Buffer int
	// SampleRetries is how many times a rollout that failed is tried again
	// on its own (keeping its key, with the fresh start Renew gives it)
	// before it resolves as an error; 0: never.
	SampleRetries int
	// Renew returns a fresh start of a failed rollout for its next try;
	// required when SampleRetries > 0.
	Renew func(failed *pipeline.Rollout) *pipeline.Rollout
	// Sessions opens the gateway sessions of rollouts whose environment
	// is an agent (envs.Agent): each runs on its own, outside the worker
	// pools, while its model calls take GenWorkers slots. nil: such
	// rollouts fail.
	Sessions Sessions
}

// Loop is the generate ⇄ envstep cycle. It implements go-streams' Flow:
// rollouts in, resolved rollouts out.
type Loop struct {
	pipeline.Inlet
	g    *pipeline.Graph
	name string
	out  chan any
	gen  *generate.Generator
	env  *envstep.Stepper
	opts Options

	stopOnce sync.Once
	stop     chan struct{}
	// agentSlots bounds the agents' model calls in flight (GenWorkers).
	agentSlots chan struct{}
	inside     atomic.Int64
	genBusy    atomic.Int64
	envBusy    atomic.Int64
	admitted   atomic.Int64
	retried    atomic.Int64

	// groups are the groups with members inside (CancelGroup): each has
	// a context its members' calls run under.
	gmu    sync.Mutex
	groups map[pipeline.GroupKey]*groupCtl
	work   context.Context
}

// groupCtl is one group's context inside the loop: cancelled by
// CancelGroup, forgotten once all its members left.
type groupCtl struct {
	ctx       context.Context
	cancel    context.CancelFunc
	cancelled bool
	left      int // members that left the loop
}

var _ streams.Flow = (*Loop)(nil)

// New adds a loop to g.
func New(g *pipeline.Graph, name string, gen *generate.Generator, env *envstep.Stepper, opts Options) *Loop {
	opts.GenWorkers = max(opts.GenWorkers, 1)
	opts.EnvWorkers = max(opts.EnvWorkers, 1)
	if opts.SampleRetries > 0 && opts.Renew == nil {
		panic("loop: SampleRetries needs Renew")
	}
	if opts.MaxInflight < 1 {
		opts.MaxInflight = opts.GenWorkers + opts.EnvWorkers
	}
	l := &Loop{
		Inlet: pipeline.NewInlet(g, opts.Buffer),
		g:     g, name: name, out: g.Chan(opts.Buffer),
		gen: gen, env: env, opts: opts,
		stop:       make(chan struct{}),
		agentSlots: make(chan struct{}, opts.GenWorkers),
		groups:     map[pipeline.GroupKey]*groupCtl{},
	}
	g.Go(name, l.run)
	return l
}

// Out is the channel of resolved rollouts.
func (l *Loop) Out() <-chan any { return l.out }

// Via connects the loop's output to next.
func (l *Loop) Via(next streams.Flow) streams.Flow {
	pipeline.Link(l.g, l.name, l.out, next)
	return next
}

// To connects the loop's output to a sink.
func (l *Loop) To(sink streams.Sink) { pipeline.Link(l.g, l.name, l.out, sink) }

// Name is the loop's stage name.
func (l *Loop) Name() string { return l.name }

// Types are the loop's (pipeline.Typed): rollouts in, resolved rollouts out.
func (l *Loop) Types() (in, out reflect.Type) {
	t := reflect.TypeFor[*pipeline.Rollout]()
	return t, t
}

// Stop cancels every trajectory inside the loop (their requests are
// aborted) and every one still to come: they resolve as cancelled and flow
// out, so that each is accounted for. The loop ends when its input ends.
func (l *Loop) Stop() { l.stopOnce.Do(func() { close(l.stop) }) }

// CancelGroup cancels the trajectories of one group, inside the loop now
// or still to come: their calls in flight abort, and each resolves as
// cancelled. The group's other business (counting, routing) is the
// caller's.
func (l *Loop) CancelGroup(key pipeline.GroupKey) {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	g := l.group(key)
	g.cancelled = true
	g.cancel()
}

// group is key's groupCtl, made when missing. Called with l.gmu held.
func (l *Loop) group(key pipeline.GroupKey) *groupCtl {
	g := l.groups[key]
	if g == nil {
		parent := l.work
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithCancel(parent)
		g = &groupCtl{ctx: ctx, cancel: cancel}
		l.groups[key] = g
	}
	return g
}

// groupCtx is the context r's calls run under: its group's, a child of
// work.
func (l *Loop) groupCtx(r *pipeline.Rollout) context.Context {
	if r.Task == nil {
		return l.work
	}
	l.gmu.Lock()
	defer l.gmu.Unlock()
	return l.group(r.GroupKey()).ctx
}

// left notes that r left the loop; its group is forgotten once all its
// members did.
func (l *Loop) left(r *pipeline.Rollout) {
	if r.Task == nil {
		return
	}
	l.gmu.Lock()
	defer l.gmu.Unlock()
	key := r.GroupKey()
	g := l.groups[key]
	if g == nil {
		return
	}
	g.left++
	if g.left >= max(r.GroupSize, 1) {
		g.cancel()
		delete(l.groups, key)
	}
}

// Inside is the number of trajectories inside the loop now.
func (l *Loop) Inside() int { return int(l.inside.Load()) }

// Busy returns the generations and the environment calls in flight now.
func (l *Loop) Busy() (gen, env int) { return int(l.genBusy.Load()), int(l.envBusy.Load()) }

// Admitted is the number of trajectories admitted so far.
func (l *Loop) Admitted() int64 { return l.admitted.Load() }

// Retried is the number of failed samples tried again.
func (l *Loop) Retried() int64 { return l.retried.Load() }

type queues struct {
	resetQ, stepQ, genNew, genCont chan *pipeline.Rollout
	slots                          chan struct{}
}

func (l *Loop) run(ctx context.Context) error {
	n := l.opts.MaxInflight
	q := queues{
		resetQ: make(chan *pipeline.Rollout, n), stepQ: make(chan *pipeline.Rollout, n),
		genNew: make(chan *pipeline.Rollout, n), genCont: make(chan *pipeline.Rollout, n),
		slots: make(chan struct{}, n),
	}
	// work is cancelled by Stop or by ctx: calls in flight abort.
	work, cancelWork := context.WithCancel(ctx)
	defer cancelWork()
	l.gmu.Lock()
	l.work = work
	l.gmu.Unlock()
	go func() {
		select {
		case <-l.stop:
			cancelWork()
		case <-work.Done():
		}
	}()

	eg, ctx := errgroup.WithContext(ctx)
	// stop tells the workers that the input ended and every trajectory
	// left (quit), or that the graph is stopping: one channel, so that an
	// idle worker waits on three channels rather than four.
	stopCtx, quit := context.WithCancel(ctx)
	defer quit()
	stop := stopCtx.Done()
	finish := func(r *pipeline.Rollout) error {
		if r.Status == pipeline.StatusError && r.Retries < l.opts.SampleRetries && work.Err() == nil {
			// Try the sample again; it keeps its slot.
			fresh := l.opts.Renew(r)
			fresh.Retries = r.Retries + 1
			fresh.Started = time.Now()
			l.retried.Add(1)
			q.resetQ <- fresh // never blocks: it holds a slot
			return nil
		}
		if !r.Done() {
			r.Resolve(pipeline.StatusCancelled)
		}
		r.TotalTime = time.Since(r.Started)
		l.left(r)
		err := pipeline.Send[any](ctx, l.out, r)
		<-q.slots
		l.inside.Add(-1)
		return err
	}
	// callCtx bounds one call by the loop's work context and the
	// trajectory's deadline.
	timeout := func(r *pipeline.Rollout) time.Duration {
		if l.opts.TimeoutOf != nil {
			return l.opts.TimeoutOf(r)
		}
		return l.opts.Timeout
	}
	callCtx := func(r *pipeline.Rollout) (context.Context, context.CancelFunc) {
		base := l.groupCtx(r)
		if d := timeout(r); d > 0 {
			return context.WithDeadline(base, r.Started.Add(d))
		}
		return base, func() {}
	}
	// interrupted resolves r after a call returned because its context
	// ended: a trajectory timeout is an error, Stop a cancellation. It
	// returns the graph's error when the whole graph is stopping.
	interrupted := func(r *pipeline.Rollout, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if work.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			r.Fail("timeout", fmt.Errorf("trajectory exceeded its timeout of %s", timeout(r)))
		} else {
			r.Resolve(pipeline.StatusCancelled)
		}
		return finish(r)
	}

	// Admission.
	eg.Go(func() error {
		in := l.Input()
		for {
			v, ok, err := pipeline.Recv(ctx, in)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			r, ok := v.(*pipeline.Rollout)
			if !ok {
				return fmt.Errorf("got %T, want *pipeline.Rollout", v)
			}
			if err := pipeline.Send(ctx, q.slots, struct{}{}); err != nil {
				return err
			}
			l.inside.Add(1)
			l.admitted.Add(1)
			r.Started = time.Now()
			if work.Err() != nil {
				if err := finish(r); err != nil {
					return err
				}
				continue
			}
			q.resetQ <- r // never blocks: at most n inside
		}
		// Every trajectory has left once all n slots can be taken.
		for range n {
			if err := pipeline.Send(ctx, q.slots, struct{}{}); err != nil {
				return err
			}
		}
		quit()
		return nil
	})
	// Environment workers: steps of trajectories inside go before resets.
	for range l.opts.EnvWorkers {
		eg.Go(func() error {
			for {
				r, step, ok := next(stop, q.stepQ, q.resetQ)
				if !ok {
					return ctx.Err()
				}
				cctx, cancel := callCtx(r)
				var done bool
				var err error
				l.envBusy.Add(1)
				if step {
					done, err = l.env.Step(cctx, r)
				} else {
					err = l.env.Reset(cctx, r)
					done = r.Done()
				}
				if err == nil && done && step {
					// The last observation's token ids.
					err = l.gen.Observe(cctx, r)
				}
				l.envBusy.Add(-1)
				cancel()
				_, agent := l.env.Agent(r)
				switch {
				case err != nil:
					err = interrupted(r, err)
				case done:
					err = finish(r)
				case agent:
					// The agent drives the trajectory, for as long as it
					// takes, outside the pools.
					eg.Go(func() error {
						cctx, cancel := callCtx(r)
						defer cancel()
						if err := l.drive(cctx, r); err != nil {
							return interrupted(r, err)
						}
						return finish(r)
					})
				case step:
					q.genCont <- r
				default:
					q.genNew <- r
				}
				if err != nil {
					return err
				}
			}
		})
	}
	// Generation workers: continuing trajectories go before new ones.
	for range l.opts.GenWorkers {
		eg.Go(func() error {
			for {
				r, _, ok := next(stop, q.genCont, q.genNew)
				if !ok {
					return ctx.Err()
				}
				cctx, cancel := callCtx(r)
				l.genBusy.Add(1)
				err := l.gen.Turn(cctx, r)
				l.genBusy.Add(-1)
				cancel()
				switch {
				case err != nil:
					err = interrupted(r, err)
				case r.Done():
					err = finish(r)
				default:
					q.stepQ <- r
				}
				if err != nil {
					return err
				}
			}
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	close(l.out)
	return nil
}

// next receives from hi if it has an item, else from lo if it has one,
// else from whichever of hi and lo has one first. ok is false when stop is
// closed.
func next(stop <-chan struct{}, hi, lo <-chan *pipeline.Rollout) (r *pipeline.Rollout, fromHi, ok bool) {
	select {
	case r = <-hi:
		return r, true, true
	default:
	}
	select {
	case r = <-lo:
		return r, false, true
	default:
	}
	select {
	case r = <-hi:
		return r, true, true
	case r = <-lo:
		return r, false, true
	case <-stop:
		return nil, false, false
	}
}
