// Package build builds a run's components from its config through one list
// of named build steps (Steps): the config checked, the output (the
// caller's hook), the inference client, its preflight, the Batch API
// client, the client's decorators, the generate stage, the environments,
// the template, the source and the expander. A run, validate and serve
// walk the same steps in the same order (Components.Walk), so what
// validate shows and sends is what a run does.
package build
