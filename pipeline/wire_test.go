package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/reugn/go-streams"
)

// TestWireChecksTypes: an edge whose output type is not the next stage's
// input fails while the graph is built, naming both stages; a chain that
// fits is connected and runs.
func TestWireChecksTypes(t *testing.T) {
	g := NewGraph()
	src := NewSource(g, "numbers", 1, func(ctx context.Context, emit func(int) error) error { return emit(1) })
	double := NewStage(g, "double", 1, 1, func(ctx context.Context, n int) ([]int, error) { return []int{2 * n}, nil })
	words := NewStage(g, "words", 1, 1, func(ctx context.Context, s string) ([]string, error) { return []string{s}, nil })
	sink := NewSink(g, "sum", 1, func(ctx context.Context, n int) error { return nil }, nil)
	err := Wire(src, []streams.Flow{double, words}, sink)
	if err == nil || !strings.Contains(err.Error(), `"double" emits int but the next stage, "words", takes string`) {
		t.Fatalf("err = %v", err)
	}

	g = NewGraph()
	src = NewSource(g, "numbers", 1, func(ctx context.Context, emit func(int) error) error { return emit(21) })
	double = NewStage(g, "double", 1, 1, func(ctx context.Context, n int) ([]int, error) { return []int{2 * n}, nil })
	var got int
	sink = NewSink(g, "sum", 1, func(ctx context.Context, n int) error { got += n; return nil }, nil)
	if err := Wire(src, []streams.Flow{double}, sink); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got != 42 {
		t.Fatalf("got %d, want 42", got)
	}
}
