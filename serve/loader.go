package serve

import (
	"context"
	"sync"
)

// loader calls load for each path added, in order, on a goroutine of its
// own: the data files the run commits are read into the queue off the
// run's commit path. Its queue is a slice under a mutex and its goroutine
// is woken through a channel that is never closed, so an add after stop,
// or after its context ended, is refused, never a panic.
type loader struct {
	load func(string)
	wake chan struct{} // buffered 1: a pending wake-up
	done chan struct{} // closed when the goroutine returns

	mu      sync.Mutex
	paths   []string
	busy    bool          // a load is running
	idle    chan struct{} // closed while nothing is queued or loading
	stopped bool          // stop was called, or the context ended
}

// newLoader starts a loader; it stops at stop, or when ctx ends (the
// paths still queued are then dropped: they stay committed on disk).
func newLoader(ctx context.Context, load func(string)) *loader {
	idle := make(chan struct{})
	close(idle)
	l := &loader{load: load, wake: make(chan struct{}, 1), done: make(chan struct{}), idle: idle}
	go l.run(ctx)
	return l
}

// add queues a path; it reports false, and queues nothing, once the
// loader stopped.
func (l *loader) add(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	if len(l.paths) == 0 && !l.busy {
		l.idle = make(chan struct{})
	}
	l.paths = append(l.paths, path)
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
	return true
}

func (l *loader) run(ctx context.Context) {
	defer close(l.done)
	for {
		l.mu.Lock()
		if ctx.Err() != nil {
			l.stopped = true
			l.paths = nil
		}
		if len(l.paths) == 0 {
			if !isClosed(l.idle) {
				close(l.idle)
			}
			l.busy = false
			stopped := l.stopped
			l.mu.Unlock()
			if stopped {
				return
			}
			select {
			case <-l.wake:
			case <-ctx.Done():
			}
			continue
		}
		p := l.paths[0]
		l.paths = l.paths[1:]
		l.busy = true
		l.mu.Unlock()
		l.load(p)
	}
}

// isClosed reports whether ch is closed; ch is only ever closed, never
// sent on.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// wait returns once every path added is loaded (or dropped, when the
// loader's context ended).
func (l *loader) wait() {
	l.mu.Lock()
	idle := l.idle
	l.mu.Unlock()
	<-idle
}

// stop refuses further paths and returns once the goroutine ended, after
// loading what was queued.
func (l *loader) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
}
