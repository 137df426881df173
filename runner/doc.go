// Package runner is trajflow's composition root: it walks the build steps
// (runner/build) that make a run's components from its config, wires the
// graph source → template → repeat → generate ⇄ envstep → groups →
// collate → sinks (the commit path, runner/commit), resumes what earlier
// runs committed (runner/resume), follows the run (runner/runstats) and
// stops it gracefully. Run is a run, Validate (runner/validate) the same
// build steps walked dry, and serve a continuous run (Options.Continuous).
package runner
