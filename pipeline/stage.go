package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/reugn/go-streams"
	"golang.org/x/sync/errgroup"
)

// Func is a stage's work on one item: zero, one or many outputs, or a fatal
// error. Per-record failures are not errors: they travel in the record.
type Func[In, Out any] func(ctx context.Context, in In) ([]Out, error)

// binder is implemented by inlets built on [Inlet]: Link hands them the
// upstream channel directly instead of forwarding through a goroutine.
type binder interface {
	Bind(<-chan any)
}

// Link connects an outlet to an inlet: directly when the inlet embeds
// [Inlet], otherwise (a go-streams flow or sink) through a forwarding
// goroutine that closes the inlet when the outlet closes. Components that
// implement go-streams' Via and To call it.
func Link(g *Graph, name string, from <-chan any, to streams.Inlet) {
	g.addQueue(name, from)
	if b, ok := to.(binder); ok {
		b.Bind(from)
		return
	}
	g.Go(name+"/link", func(ctx context.Context) error {
		in := to.In()
		for {
			v, ok, err := Recv(ctx, from)
			if err != nil {
				return err
			}
			if !ok {
				close(in)
				return nil
			}
			if err := Send(ctx, in, v); err != nil {
				return err
			}
		}
	})
}

// Inlet is the input side of a component: go-streams' In() channel, which
// Link may replace by the upstream's output channel before the graph runs.
// Embed it, create it with [NewInlet], and read from Input once running.
// Link (and so Bind) is called while the graph is built, before Run starts
// the goroutines that call Input.
type Inlet struct {
	in  chan any
	src <-chan any
}

// NewInlet returns an Inlet whose own channel holds buffer items.
func NewInlet(g *Graph, buffer int) Inlet { return Inlet{in: g.Chan(buffer)} }

// In is the input channel for go-streams components.
func (i *Inlet) In() chan<- any { return i.in }

// Bind makes ch the input instead of In's channel.
func (i *Inlet) Bind(ch <-chan any) {
	i.src = ch
}

// Input is the channel to read: the bound upstream channel, or In's.
func (i *Inlet) Input() <-chan any {
	if i.src != nil {
		return i.src
	}
	return i.in
}

// Stage runs a Func on a number of workers between an input and an output
// channel. With more than one worker the output order is not the input
// order. It implements go-streams' Flow: connect it with Via and To, then
// run the graph.
type Stage[In, Out any] struct {
	Inlet
	g     *Graph
	name  string
	out   chan any
	flush Flush[Out]
	// tick, when set, runs every tickEvery between items (one worker only).
	tick      Flush[Out]
	tickEvery time.Duration
}

// Flush produces a stage's last outputs once its input is closed and every
// worker is done (a partial batch).
type Flush[Out any] func(ctx context.Context) ([]Out, error)

var _ streams.Flow = (*Stage[int, int])(nil)

// NewStage adds a stage to g: workers goroutines (at least one) apply fn to
// every input item; the output channel holds buffer items.
func NewStage[In, Out any](g *Graph, name string, workers, buffer int, fn Func[In, Out]) *Stage[In, Out] {
	if workers < 1 {
		workers = 1
	}
	s := &Stage[In, Out]{g: g, name: name, out: g.Chan(buffer)}
	s.Inlet = NewInlet(g, buffer)
	g.Go(name, func(ctx context.Context) error {
		eg, wctx := errgroup.WithContext(ctx)
		in := s.Input()
		if s.tick != nil {
			eg.Go(func() error { return workTicking(wctx, in, s.out, fn, s.tick, s.tickEvery) })
		} else {
			for range workers {
				eg.Go(func() error { return work(wctx, in, s.out, fn) })
			}
		}
		if err := eg.Wait(); err != nil {
			return err
		}
		if s.flush != nil {
			outs, err := s.flush(ctx)
			if err != nil {
				return err
			}
			for _, o := range outs {
				if err := Send[any](ctx, s.out, o); err != nil {
					return err
				}
			}
		}
		close(s.out)
		return nil
	})
	return s
}

// OnFlush sets the stage's flush function. Call it while building the graph.
func (s *Stage[In, Out]) OnFlush(f Flush[Out]) *Stage[In, Out] {
	s.flush = f
	return s
}

// OnTick makes the stage call f every interval, between items, and send
// what it returns downstream in order with the other outputs (a collator
// flushing a partial batch on a timer). A ticking stage runs one worker,
// whatever NewStage was given, so f never runs beside fn. Call it while
// building the graph; an interval <= 0 leaves the stage untimed.
func (s *Stage[In, Out]) OnTick(interval time.Duration, f Flush[Out]) *Stage[In, Out] {
	if interval > 0 {
		s.tick, s.tickEvery = f, interval
	}
	return s
}

// workTicking is work with a timer: tick runs every interval between
// items.
func workTicking[In, Out any](ctx context.Context, in <-chan any, out chan<- any, fn Func[In, Out], tick Flush[Out], every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	send := func(outs []Out) error {
		for _, o := range outs {
			if err := Send[any](ctx, out, o); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		var outs []Out
		select {
		case v, ok := <-in:
			if !ok {
				return nil
			}
			item, ok := v.(In)
			if !ok {
				var want In
				return fmt.Errorf("got %T, want %T", v, want)
			}
			var err error
			if outs, err = fn(ctx, item); err != nil {
				return err
			}
		case <-t.C:
			var err error
			if outs, err = tick(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := send(outs); err != nil {
			return err
		}
	}
}

func work[In, Out any](ctx context.Context, in <-chan any, out chan<- any, fn Func[In, Out]) error {
	for {
		v, ok, err := Recv(ctx, in)
		if err != nil || !ok {
			return err
		}
		item, ok := v.(In)
		if !ok {
			var want In
			return fmt.Errorf("got %T, want %T", v, want)
		}
		outs, err := fn(ctx, item)
		if err != nil {
			return err
		}
		for _, o := range outs {
			if err := Send[any](ctx, out, o); err != nil {
				return err
			}
		}
	}
}

// Out is the stage's output channel.
func (s *Stage[In, Out]) Out() <-chan any { return s.out }

// Via connects the stage's output to next and returns next.
func (s *Stage[In, Out]) Via(next streams.Flow) streams.Flow {
	Link(s.g, s.name, s.out, next)
	return next
}

// To connects the stage's output to a sink. Unlike go-streams' flows it does
// not block: Graph.Run waits for the sink.
func (s *Stage[In, Out]) To(sink streams.Sink) { Link(s.g, s.name, s.out, sink) }

// Source emits items produced by a generator. It implements go-streams'
// Source.
type Source[T any] struct {
	g    *Graph
	name string
	out  chan any
}

var _ streams.Source = (*Source[int])(nil)

// NewSource adds a source to g. gen calls emit for every item; emit fails
// only when the graph stops. The output is closed when gen returns nil.
func NewSource[T any](g *Graph, name string, buffer int, gen func(ctx context.Context, emit func(T) error) error) *Source[T] {
	s := &Source[T]{g: g, name: name, out: g.Chan(buffer)}
	g.Go(name, func(ctx context.Context) error {
		err := gen(ctx, func(v T) error { return Send[any](ctx, s.out, v) })
		if err != nil {
			return err
		}
		close(s.out)
		return nil
	})
	return s
}

// Out is the source's output channel.
func (s *Source[T]) Out() <-chan any { return s.out }

// Via connects the source to a flow and returns it.
func (s *Source[T]) Via(next streams.Flow) streams.Flow {
	Link(s.g, s.name, s.out, next)
	return next
}

// Sink consumes items. It implements go-streams' Sink.
type Sink[T any] struct {
	Inlet
	name string
	done chan struct{}
}

var _ streams.Sink = (*Sink[int])(nil)

// NewSink adds a sink to g: consume is called for every item in order, then
// finish once the input is closed (not when the graph is cancelled: an
// interrupted sink must not commit a partial result as if it were whole).
// finish may be nil.
func NewSink[T any](g *Graph, name string, buffer int, consume func(ctx context.Context, v T) error, finish func(ctx context.Context) error) *Sink[T] {
	s := &Sink[T]{name: name, done: make(chan struct{})}
	s.Inlet = NewInlet(g, buffer)
	g.Go(name, func(ctx context.Context) error {
		defer close(s.done)
		in := s.Input()
		for {
			v, ok, err := Recv(ctx, in)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			item, ok := v.(T)
			if !ok {
				var want T
				return fmt.Errorf("got %T, want %T", v, want)
			}
			if err := consume(ctx, item); err != nil {
				return err
			}
		}
		if finish == nil {
			return nil
		}
		return finish(ctx)
	})
	return s
}

// AwaitCompletion blocks until the sink has consumed its input and finished,
// or the graph stopped.
func (s *Sink[T]) AwaitCompletion() { <-s.done }
