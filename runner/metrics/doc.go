// Package metrics computes the aggregate metrics of a run from its
// rollouts: row and status counts, reward moments, correctness, pass@k,
// pass^k and mean@k, per-task completion, token, turn and tool-call
// distributions, termination rates, token continuity breaks and group
// counts.
//
// An Aggregator is fed one rollout at a time and keeps memory in the
// number of tasks and groups, never in the number of rows: per task it
// keeps the count of samples and of correct samples, per group its keep
// decision, and per distribution a fixed-size histogram. When the rows of
// each task arrive together (Options.Contiguous), it folds each task into
// the totals as soon as the next task starts and keeps only a set of the
// finished tasks (about one bit a task). The exact definitions of every
// metric are in docs/metrics.md.
package metrics
