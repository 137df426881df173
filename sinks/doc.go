// Package sinks declares where committed rows go: a [Sink] takes Arrow
// record batches of rollout rows (package schema's layout) and commits
// them; a [GroupSink] also takes the groups a record is collated from, in
// its place; an [Aborter] can also be dropped without committing.
//
// The implementations live in the packages below:
//
//   - parquet: durable part files, committed atomically (temporary name,
//     fsync, rename), the run's primary output;
//   - jsonl: NeMo Gym-shaped JSON lines (File commits a whole file at once);
//   - arrowipc: an Arrow IPC stream, for a live consumer;
//   - lines: append-only JSON-lines logs beside the data (failures,
//     rejected input rows).
//
// A new sink implements Sink (and Aborter when it stages data), and the
// runner wires it; see docs/architecture.md.
package sinks
