package runner

import "errors"

// closers undo what a run set up, in reverse order (run), and implement
// output.Closers; err joins the errors of those added by Check.
type closers struct {
	fns []func()
	err error
}

// Add adds a closer whose failure is no error of the run's.
func (c *closers) Add(close func()) { c.fns = append(c.fns, close) }

// Check adds a closer whose error the run returns, joined with its own:
// closing a writer flushes and syncs what it holds, and releasing the
// output's lock is what lets the next run in, so neither may fail quietly.
func (c *closers) Check(close func() error) {
	c.Add(func() {
		if err := close(); err != nil {
			c.err = errors.Join(c.err, err)
		}
	})
}

// run runs the closers, the last added first.
func (c *closers) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}
