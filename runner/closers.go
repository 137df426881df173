package runner

import "errors"

// closeChecked adds a closer whose error the run returns, joined with its
// own: closing a writer flushes and syncs what it holds, and releasing the
// output's lock is what lets the next run in, so neither may fail quietly.
func (r *run) closeChecked(close func() error) {
	r.closers = append(r.closers, func() {
		if err := close(); err != nil {
			r.closeErr = errors.Join(r.closeErr, err)
		}
	})
}
