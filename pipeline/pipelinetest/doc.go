// Package pipelinetest builds deterministic groups of rollouts for tests and
// benchmarks of collate and the sinks.
package pipelinetest
