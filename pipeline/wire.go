package pipeline

import (
	"fmt"
	"reflect"

	"github.com/reugn/go-streams"
)

// Job is a group to sample: a task and its attempt. The source stage
// emits it, the template and repeat stages take it.
type Job struct {
	Task    *Task
	Attempt int
	// Fresh is true for a task just read (its prompt is still to render).
	Fresh bool
}

// Routed is a decided group and the output directory it goes to: the
// groups stage emits it, the collate stage takes it.
type Routed struct {
	Group *Group
	Dest  string
}

// Typed is a graph component that declares the items it takes and emits
// (in is nil for a source, out nil for a sink), so that Wire checks an
// edge before the graph runs.
type Typed interface {
	Name() string
	Types() (in, out reflect.Type)
}

// Wire connects src through flows, in order, to sink, after checking that
// each component emits the type the next one takes. A mismatch is an
// error naming both stages, found while the graph is built: nothing is
// connected then, and the graph must not run.
func Wire(src streams.Source, flows []streams.Flow, sink streams.Sink) error {
	chain := make([]any, 0, len(flows)+2)
	chain = append(chain, src)
	for _, f := range flows {
		chain = append(chain, f)
	}
	chain = append(chain, sink)
	for i := 0; i+1 < len(chain); i++ {
		a, aok := chain[i].(Typed)
		b, bok := chain[i+1].(Typed)
		switch {
		case !aok:
			return fmt.Errorf("wiring: stage %d (%T) declares no types", i, chain[i])
		case !bok:
			return fmt.Errorf("wiring: stage %d (%T) declares no types", i+1, chain[i+1])
		}
		_, out := a.Types()
		in, _ := b.Types()
		if out != in {
			return fmt.Errorf("wiring: stage %q emits %v but the next stage, %q, takes %v", a.Name(), out, b.Name(), in)
		}
	}
	if len(flows) == 0 {
		return fmt.Errorf("wiring: no stage between the source %q and the sink", chain[0].(Typed).Name())
	}
	f := src.Via(flows[0])
	for _, next := range flows[1:] {
		f = f.Via(next)
	}
	f.To(sink)
	return nil
}

// Name is the stage's name.
func (s *Stage[In, Out]) Name() string { return s.name }

// Types are the stage's input and output types.
func (s *Stage[In, Out]) Types() (in, out reflect.Type) {
	return reflect.TypeFor[In](), reflect.TypeFor[Out]()
}

// Name is the source's name.
func (s *Source[T]) Name() string { return s.name }

// Types are the source's: none taken, T emitted.
func (s *Source[T]) Types() (in, out reflect.Type) { return nil, reflect.TypeFor[T]() }

// Name is the sink's name.
func (s *Sink[T]) Name() string { return s.name }

// Types are the sink's: T taken, none emitted.
func (s *Sink[T]) Types() (in, out reflect.Type) { return reflect.TypeFor[T](), nil }
