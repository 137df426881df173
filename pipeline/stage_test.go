package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reugn/go-streams/flow"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
)

// ints emits 0..n-1.
func ints(g *pipeline.Graph, n int) *pipeline.Source[int] {
	return pipeline.NewSource(g, "ints", 0, func(ctx context.Context, emit func(int) error) error {
		for i := range n {
			if err := emit(i); err != nil {
				return err
			}
		}
		return nil
	})
}

func collect(g *pipeline.Graph, got *[]int) *pipeline.Sink[int] {
	return pipeline.NewSink(g, "collect", 0, func(_ context.Context, v int) error {
		*got = append(*got, v)
		return nil
	}, nil)
}

func TestStagesInOrder(t *testing.T) {
	defer leak.Check(t)()
	tests := []struct {
		name    string
		workers int
		buffer  int
	}{
		{"one worker unbuffered", 1, 0},
		{"one worker buffered", 1, 16},
		{"many workers", 8, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := pipeline.NewGraph()
			double := pipeline.NewStage(g, "double", tt.workers, tt.buffer, func(_ context.Context, v int) ([]int, error) {
				return []int{2 * v, 2*v + 1}, nil
			})
			var got []int
			ints(g, 100).Via(double).To(collect(g, &got))
			if err := g.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if tt.workers > 1 {
				slices.Sort(got)
			}
			if len(got) != 200 {
				t.Fatalf("got %d items, want 200", len(got))
			}
			for i, v := range got {
				if v != i {
					t.Fatalf("item %d = %d", i, v)
				}
			}
		})
	}
}

func TestForeignFlowInTheMiddle(t *testing.T) {
	defer leak.Check(t)()
	g := pipeline.NewGraph()
	square := flow.NewMap(func(v int) int { return v * v }, 1)
	var got []int
	ints(g, 5).Via(square).Via(pipeline.NewStage(g, "id", 1, 0, func(_ context.Context, v int) ([]int, error) {
		return []int{v}, nil
	})).To(collect(g, &got))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 4, 9, 16}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestFailureStopsEveryGoroutine(t *testing.T) {
	defer leak.Check(t)()
	boom := errors.New("disk full")
	g := pipeline.NewGraph()
	var finished atomic.Bool
	sink := pipeline.NewSink(g, "sink", 0, func(_ context.Context, v int) error {
		if v == 50 {
			return boom
		}
		return nil
	}, func(context.Context) error { finished.Store(true); return nil })
	// An endless source: only the sink's failure can stop it.
	src := pipeline.NewSource(g, "endless", 0, func(ctx context.Context, emit func(int) error) error {
		for i := 0; ; i++ {
			if err := emit(i); err != nil {
				return err
			}
		}
	})
	src.Via(pipeline.NewStage(g, "slow", 4, 2, func(ctx context.Context, v int) ([]int, error) {
		return []int{v}, nil
	})).To(sink)
	err := g.Run(context.Background())
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "sink: ") {
		t.Fatalf("got %v, want the sink's error", err)
	}
	if finished.Load() {
		t.Fatal("a failed sink must not be finished")
	}
}

func TestCancelStopsEveryGoroutine(t *testing.T) {
	defer leak.Check(t)()
	g := pipeline.NewGraph()
	blocked := make(chan struct{})
	src := pipeline.NewSource(g, "endless", 0, func(ctx context.Context, emit func(int) error) error {
		for i := 0; ; i++ {
			if err := emit(i); err != nil {
				return err
			}
		}
	})
	var once atomic.Bool
	src.Via(pipeline.NewStage(g, "block", 3, 0, func(ctx context.Context, v int) ([]int, error) {
		if once.CompareAndSwap(false, true) {
			close(blocked)
		}
		<-ctx.Done() // a call that only the context ends
		return nil, ctx.Err()
	})).To(pipeline.NewSink(g, "sink", 0, func(context.Context, int) error { return nil }, nil))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-blocked; cancel() }()
	if err := g.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestTypeMismatchIsAnError(t *testing.T) {
	defer leak.Check(t)()
	g := pipeline.NewGraph()
	strs := pipeline.NewSource(g, "strs", 0, func(ctx context.Context, emit func(string) error) error {
		return emit("x")
	})
	strs.Via(pipeline.NewStage(g, "ints", 1, 0, func(_ context.Context, v int) ([]int, error) {
		return []int{v}, nil
	})).To(pipeline.NewSink(g, "sink", 0, func(context.Context, int) error { return nil }, nil))
	err := g.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "got string, want int") {
		t.Fatalf("got %v", err)
	}
}

func TestFlushEmitsLastBatch(t *testing.T) {
	defer leak.Check(t)()
	g := pipeline.NewGraph()
	var batch []int
	sums := pipeline.NewStage(g, "sum3", 1, 0, func(_ context.Context, v int) ([]int, error) {
		batch = append(batch, v)
		if len(batch) < 3 {
			return nil, nil
		}
		s := batch[0] + batch[1] + batch[2]
		batch = batch[:0]
		return []int{s}, nil
	}).OnFlush(func(context.Context) ([]int, error) {
		s := 0
		for _, v := range batch {
			s += v
		}
		return []int{s}, nil
	})
	var got []int
	ints(g, 7).Via(sums).To(collect(g, &got))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []int{0 + 1 + 2, 3 + 4 + 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

type held struct{ released *atomic.Int64 }

func (h held) Release() { h.released.Add(1) }

func TestStoppedGraphReleasesBufferedItems(t *testing.T) {
	defer leak.Check(t)()
	var released atomic.Int64
	g := pipeline.NewGraph()
	boom := errors.New("boom")
	src := pipeline.NewSource(g, "held", 8, func(ctx context.Context, emit func(held) error) error {
		for range 8 {
			if err := emit(held{&released}); err != nil {
				return err
			}
		}
		return nil
	})
	sinkStarted := make(chan struct{})
	src.Via(pipeline.NewStage(g, "pass", 1, 8, func(_ context.Context, h held) ([]held, error) {
		return []held{h}, nil
	})).To(pipeline.NewSink(g, "fail", 0, func(ctx context.Context, h held) error {
		close(sinkStarted)
		h.Release()
		time.Sleep(10 * time.Millisecond) // let the others fill their buffers
		return boom
	}, nil))
	if err := g.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	<-sinkStarted
	// Items still queued in channels were released by Run; items a worker
	// held when it stopped are that worker's to release (none here reach
	// past the stage: it forwards them at once).
	if n := released.Load(); n < 2 {
		t.Fatalf("released %d items, want the sink's and the buffered ones", n)
	}
}

func TestRunTwice(t *testing.T) {
	g := pipeline.NewGraph()
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); err == nil {
		t.Fatal("second Run should fail")
	}
}

// A pipeline: a source, a stage that fans out, and a sink.
func Example() {
	g := pipeline.NewGraph()
	src := pipeline.NewSource(g, "words", 0, func(ctx context.Context, emit func(string) error) error {
		for _, w := range []string{"to", "be"} {
			if err := emit(w); err != nil {
				return err
			}
		}
		return nil
	})
	twice := pipeline.NewStage(g, "twice", 1, 0, func(_ context.Context, w string) ([]string, error) {
		return []string{w, strings.ToUpper(w)}, nil
	})
	sink := pipeline.NewSink(g, "print", 0, func(_ context.Context, w string) error {
		fmt.Println(w)
		return nil
	}, nil)
	src.Via(twice).To(sink)
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// to
	// TO
	// be
	// BE
}

// TestTickFlushesPartialBatch: a stage with OnTick emits what it holds on
// the timer, while its input is still open, in order with its other
// outputs.
func TestTickFlushesPartialBatch(t *testing.T) {
	defer leak.Check(t)()
	g := pipeline.NewGraph()
	var held []int
	gate := make(chan struct{})
	src := pipeline.NewSource(g, "src", 0, func(ctx context.Context, emit func(int) error) error {
		for _, v := range []int{1, 2} {
			if err := emit(v); err != nil {
				return err
			}
		}
		<-gate // the input stays open until the tick flushed 1+2
		return emit(10)
	})
	batcher := pipeline.NewStage(g, "batch", 4, 0, func(_ context.Context, v int) ([]int, error) {
		held = append(held, v)
		return nil, nil
	}).OnTick(5*time.Millisecond, func(context.Context) ([]int, error) {
		if len(held) == 0 {
			return nil, nil
		}
		s := 0
		for _, v := range held {
			s += v
		}
		held = held[:0]
		return []int{s}, nil
	}).OnFlush(func(context.Context) ([]int, error) {
		return []int{-len(held)}, nil
	})
	var got []int
	sink := pipeline.NewSink(g, "collect", 0, func(_ context.Context, v int) error {
		got = append(got, v)
		if v == 3 {
			close(gate)
		}
		return nil
	}, nil)
	src.Via(batcher).To(sink)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 1+2 on a tick while the input was open; 10 on a later tick or, held
	// at the end, counted by the flush.
	if !slices.Equal(got, []int{3, 10, 0}) && !slices.Equal(got, []int{3, -1}) {
		t.Fatalf("got %v, want [3 10 0] or [3 -1]", got)
	}
}
