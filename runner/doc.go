// Package runner builds a pipeline from a run config and runs it: source →
// template → repeat → generate ⇄ envstep → groups → collate → sinks, with a
// progress line, the accounting of every rollout, and a summary at the end.
package runner
