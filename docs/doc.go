// Package docs holds trajflow's documentation (the Markdown files of this
// directory) and the tests that keep it true. It has no code: its test
// TestLayers reads the "What may import what" table of architecture.md and
// fails when a package of the module imports what its row does not allow,
// or when a package has no row; TestSizeLimits fails when a function of
// the files it names is over its cyclomatic complexity limit, or the files
// over their line limit.
package docs
