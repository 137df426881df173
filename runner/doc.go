// Package runner is trajflow's composition root: it walks the build steps
// (runner/build) that make a run's components from its config, lists the
// chain source → template → repeat → generate ⇄ envstep → groups →
// collate → sinks (each stage built by its own package; the commit path
// is runner/commit), resumes what earlier runs committed (runner/resume),
// follows the run (runner/runstats) and stops it gracefully (runner/stop).
// Run is a run, Validate (runner/validate) the same build steps walked
// dry, and serve a continuous run (Options.Continuous).
package runner
