package runner

import "errors"

// closers undo what a run set up, in reverse order (cleanup); err joins
// the errors of those added by closeChecked.
type closers struct {
	fns []func()
	err error
}

// add adds a closer whose failure is no error of the run's.
func (c *closers) add(close func()) { c.fns = append(c.fns, close) }

// closeChecked adds a closer whose error the run returns, joined with its
// own: closing a writer flushes and syncs what it holds, and releasing the
// output's lock is what lets the next run in, so neither may fail quietly.
func (r *run) closeChecked(close func() error) {
	r.closers.add(func() {
		if err := close(); err != nil {
			r.closers.err = errors.Join(r.closers.err, err)
		}
	})
}
