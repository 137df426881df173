package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Graph owns the goroutines and channels of one pipeline. Build it (create
// sources, stages and sinks on it and connect them with Via and To), then
// call Run once.
type Graph struct {
	mu      sync.Mutex
	started bool
	procs   []proc
	chans   []chan any
	queues  []queue
}

// queue is the channel after a named component, for QueueDepths.
type queue struct {
	after string
	ch    <-chan any
}

type proc struct {
	name string
	run  func(ctx context.Context) error
}

// NewGraph returns an empty graph.
func NewGraph() *Graph { return &Graph{} }

// Go adds a goroutine to the graph. It starts when Run is called; its error
// (other than the context's own) stops the whole graph and is returned by
// Run, prefixed with name.
func (g *Graph) Go(name string, run func(ctx context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		panic("pipeline: Graph.Go called after Run")
	}
	g.procs = append(g.procs, proc{name: name, run: run})
}

// Chan makes a channel whose leftover items are released when the graph
// stops (see Run).
func (g *Graph) Chan(buffer int) chan any {
	ch := make(chan any, buffer)
	g.mu.Lock()
	g.chans = append(g.chans, ch)
	g.mu.Unlock()
	return ch
}

// QueueDepths returns how many items wait in each queue between
// components now, keyed by the name of the component that fills it. Safe
// to call while the graph runs.
func (g *Graph) QueueDepths() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.queues))
	for _, q := range g.queues {
		out[q.after] = len(q.ch)
	}
	return out
}

func (g *Graph) addQueue(after string, ch <-chan any) {
	g.mu.Lock()
	g.queues = append(g.queues, queue{after: after, ch: ch})
	g.mu.Unlock()
}

// Releaser is an item that holds resources until released (an Arrow record).
type Releaser interface{ Release() }

// Run starts every goroutine of the graph and waits for all of them. The
// first error cancels the rest; Run returns it. Cancelling ctx stops the
// graph and Run returns ctx's error. When Run returns no goroutine of the
// graph is left, and items left in the graph's channels that implement
// Releaser have been released.
func (g *Graph) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("pipeline: Graph.Run called twice")
	}
	g.started = true
	procs := g.procs
	g.mu.Unlock()

	eg, gctx := errgroup.WithContext(ctx)
	for _, p := range procs {
		eg.Go(func() error {
			err := p.run(gctx)
			if err == nil || errors.Is(err, context.Canceled) && gctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%s: %w", p.name, err)
		})
	}
	err := eg.Wait()
	g.drain()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return err
}

// drain empties the graph's channels after every goroutine stopped.
func (g *Graph) drain() {
	for _, ch := range g.chans {
		for {
			select {
			case v, ok := <-ch:
				if !ok {
					goto next
				}
				if r, ok := v.(Releaser); ok {
					r.Release()
				}
				continue
			default:
			}
			break
		}
	next:
	}
}

// Send sends v on ch unless ctx is done first.
func Send[T any](ctx context.Context, ch chan<- T, v T) error {
	// A send that can go at once needs no select over ctx: it costs a
	// third as much, and most sends into buffered channels can.
	select {
	case ch <- v:
		return nil
	default:
	}
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Recv receives from ch unless ctx is done first. ok is false when ch is
// closed.
func Recv[T any](ctx context.Context, ch <-chan T) (v T, ok bool, err error) {
	select {
	case v, ok = <-ch:
		return v, ok, nil
	default:
	}
	select {
	case v, ok = <-ch:
		return v, ok, nil
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}
