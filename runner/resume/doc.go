// Package resume is what a run finds and leaves in its output directory
// for the next run of it: the directory's lock (LockDir), its secret key
// (SecretKey), a sharded run's manifest and each shard's status (Root,
// WriteShardStatus), the rendered inputs (Inputs, inputs.jsonl), and the
// work committed before (Load: which tasks are done, checked against the
// config's fingerprint, the input and the schema version).
package resume
