// Package sinks declares where committed rows go: a [Sink] takes Arrow
// record batches of rollout rows (package schema's layout) and commits
// them; a [GroupSink] also takes the groups a record is collated from, in
// its place; an [Aborter] can also be dropped without committing. A
// [Part] is a sink whose files are committed with each Parquet part
// (exactly once after any crash): registered by config key
// ([RegisterPart], a [PartSpec]), it is staged, committed and aborted
// with each part by the committer (runner/commit), and paired with the
// committed parts at a resume ([PairFiles]).
//
// The implementations live in the packages below:
//
//   - parquet: durable part files, committed atomically (temporary name,
//     fsync, rename), the run's primary output;
//   - jsonl: NeMo Gym-shaped JSON lines (File commits a whole file at once;
//     Parts, the part sink of output.jsonl, a file beside each part);
//   - openaibatch: OpenAI's Batch output and error files beside each part
//     (output.openai_batch), a part sink;
//   - arrowipc: an Arrow IPC stream, for a live consumer;
//   - lines: append-only JSON-lines logs beside the data (failures,
//     rejected input rows).
//
// A new sink implements Sink (and Aborter when it stages data), and the
// committer opens it; a new exactly-once sink implements Part and
// registers itself, and runner/commit/parts.go imports it; see
// docs/architecture.md ("Where a new sink goes").
package sinks
