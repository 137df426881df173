// Package validate is trajflow validate (runner.Validate): it walks a
// run's build steps dry, in the run's order, reporting every problem and
// going on; renders the first rows through the components built; and with
// Send sends each row's first request through the client a run uses. It
// writes nothing.
package validate
