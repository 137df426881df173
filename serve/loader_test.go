package serve

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The loader loads the paths in the order added, one at a time; wait
// returns once all are loaded; an add after stop, or after its context
// ended, is refused (never a panic) and loads nothing.
func TestLoader(t *testing.T) {
	for _, tt := range []struct {
		name   string
		end    func(l *loader, cancel context.CancelFunc)
		before int // paths added before the end
	}{
		{"stop", func(l *loader, _ context.CancelFunc) { l.stop() }, 20},
		{"stop twice", func(l *loader, _ context.CancelFunc) { l.stop(); l.stop() }, 5},
		{"context ended", func(l *loader, cancel context.CancelFunc) { cancel(); <-l.done }, 0},
		{"context ended, then stop", func(l *loader, cancel context.CancelFunc) { cancel(); l.stop() }, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var got []string
			l := newLoader(ctx, func(p string) {
				time.Sleep(time.Millisecond)
				mu.Lock()
				got = append(got, p)
				mu.Unlock()
			})
			var want []string
			for i := range tt.before {
				p := fmt.Sprintf("part-%05d", i)
				want = append(want, p)
				if !l.add(p) {
					t.Fatalf("add %s refused before the end", p)
				}
			}
			l.wait()
			mu.Lock()
			if !slices.Equal(got, want) {
				t.Fatalf("loaded %v, want %v", got, want)
			}
			mu.Unlock()
			tt.end(l, cancel)
			if l.add("late") {
				t.Fatal("an add after the end was accepted")
			}
			l.wait() // returns: nothing is pending
			mu.Lock()
			defer mu.Unlock()
			if slices.Contains(got, "late") {
				t.Fatal("a path added after the end was loaded")
			}
		})
	}
}

// stop loads what was queued before it returns; wait returns while adds
// go on from other goroutines without a race.
func TestLoaderStopDrains(t *testing.T) {
	var mu sync.Mutex
	n := 0
	l := newLoader(context.Background(), func(string) {
		mu.Lock()
		n++
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				l.add(fmt.Sprintf("%d-%d", g, i))
				if i%10 == 0 {
					l.wait()
				}
			}
		}()
	}
	wg.Wait()
	l.stop()
	mu.Lock()
	defer mu.Unlock()
	if n != 100 {
		t.Fatalf("loaded %d of 100 before stop returned", n)
	}
}
