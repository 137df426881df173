// Package sim is the "sim" environment for benchmarks: it does what the
// built-in simulator's trailer says (see inference/sim.Trailer), so that every
// schedule under test faces the same workload. It waits the trailer's
// env_delay_ms, answers with an observation of obs_tokens words while turns
// are left, and on the last turn rewards the trajectory by its correct flag.
package sim
