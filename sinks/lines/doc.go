// Package lines writes the append-only JSON-lines logs kept beside a run's
// data: failures.jsonl (every rollout that resolved as an error, with its
// class and where its input came from) and rejects.jsonl (input rows
// skipped as bad). A Writer creates its file on the first line.
package lines
