package serve

import (
	"context"
	"os"
	"reflect"
	"testing"
)

// The drift cache gives an ack the engine's side of a step's rows as the
// step's file does, for the whole step and for a subset of its groups (a
// rank's slice, a remainder), in the file's order; engineRows takes it
// from the cache (it answers with the file gone), and a step acked is
// forgotten (read from the file again).
func TestDriftCacheMatchesFile(t *testing.T) {
	s, st, fresh := testStep(t, 6, 4, 64)
	defer func() {
		for _, g := range fresh {
			g.release()
		}
	}()
	ctx := context.Background()
	keep := map[groupRef]bool{st.Groups[4]: true, st.Groups[1]: true}
	wantAll, err := s.engineRows(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantKeep, err := s.engineRows(ctx, st, keep)
	if err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for _, row := range wantAll.logprobs {
		tokens += len(row)
	}
	if len(wantAll.logprobs) != 24 || tokens == 0 || len(wantKeep.logprobs) != 8 {
		t.Fatalf("the step's file gives %d rows, %d tokens, %d kept rows; want 24 rows with tokens, 8 kept", len(wantAll.logprobs), tokens, len(wantKeep.logprobs))
	}
	if _, ok := s.engine.get(st, nil); ok {
		t.Fatal("a step made before any ack carried logprobs is held")
	}
	// Once an ack carried logprobs, a step's write holds its groups.
	s.engine.use()
	s.startWrite(st.Step+1, fresh)
	if err := s.written(ctx, st.Step+1); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.engine.get(&stepState{Step: st.Step + 1, Groups: st.Groups}, nil); !ok || !reflect.DeepEqual(got, wantAll) {
		t.Fatalf("a step written after an ack with logprobs: held %t, rows equal %t", ok, reflect.DeepEqual(got, wantAll))
	}
	s.engine.put(st.Step, fresh)
	for _, tt := range []struct {
		name string
		keep map[groupRef]bool
		want engineRows
	}{{"whole step", nil, wantAll}, {"groups 1 and 4", keep, wantKeep}} {
		got, ok := s.engine.get(st, tt.keep)
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Fatalf("%s: held %t, rows differ from the file's", tt.name, ok)
		}
	}
	if err := os.Remove(s.stepFile(st.Step)); err != nil {
		t.Fatal(err)
	}
	got, err := s.engineRows(ctx, st, keep)
	if err != nil || !reflect.DeepEqual(got, wantKeep) {
		t.Fatalf("engineRows with the file gone: %v; rows equal %t", err, reflect.DeepEqual(got, wantKeep))
	}
	s.engine.drop(st.Step)
	if _, err := s.engineRows(ctx, st, nil); err == nil {
		t.Fatal("engineRows of a step dropped answered without its file")
	}
}

// The cache holds at most driftCacheSteps steps, the oldest going first.
func TestDriftCacheBound(t *testing.T) {
	var c driftCache
	for n := int64(1); n <= driftCacheSteps+2; n++ {
		c.put(n, nil)
	}
	for n := int64(1); n <= driftCacheSteps+2; n++ {
		_, ok := c.get(&stepState{Step: n}, nil)
		if want := n > 2; ok != want {
			t.Fatalf("step %d held %t, want %t", n, ok, want)
		}
	}
}
