package build

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/trajflow/trajflow/sources"
)

// ErrInterrupted: the run's context was cancelled (a signal). It also
// matches context.Canceled.
var ErrInterrupted error = interrupted{}

type interrupted struct{}

func (interrupted) Error() string        { return "interrupted" }
func (interrupted) Is(target error) bool { return target == context.Canceled }

// sourceWaitNote is how long opening the source may take before the run
// says what it waits for (a named pipe's writer).
var sourceWaitNote = 2 * time.Second

// openSource opens the source. Opening a named pipe waits for its writer:
// the run says so on stderr after a while, and a stop (a signal, ctx)
// ends the wait rather than being ignored (the abandoned open ends with
// the process).
func openSource(ctx context.Context, cfg sources.Config, opts sources.Options, stderr io.Writer) (sources.Reader, error) {
	type opened struct {
		src sources.Reader
		err error
	}
	done := make(chan opened, 1)
	go func() {
		src, err := sources.Open(cfg, opts)
		done <- opened{src, err}
	}()
	note := time.NewTimer(sourceWaitNote)
	defer note.Stop()
	for {
		select {
		case o := <-done:
			return o.src, o.err
		case <-note.C:
			fmt.Fprintf(stderr, "trajflow: source.path %s: still opening it (a named pipe waits for its writer)\n", cfg.Path)
		case <-ctx.Done():
			// An open that is merely quick still wins: the stop then
			// goes on as the run's own.
			select {
			case o := <-done:
				return o.src, o.err
			case <-time.After(100 * time.Millisecond):
			}
			go func() {
				// Close what the open gives if it ever returns.
				if o := <-done; o.src != nil {
					_ = o.src.Close() // best effort: nobody reads it
				}
			}()
			return nil, fmt.Errorf("%w (%v) while opening source.path %s", ErrInterrupted, context.Cause(ctx), cfg.Path)
		}
	}
}
