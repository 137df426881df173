// Package schema is trajflow's output contract: the column names and their
// indices, the Arrow schema of a rollout row, the schema version written
// into every file, and the decoder from Arrow records back to rollouts.
//
// Every component that writes or reads output depends on this package:
// the collate stage builds records in [Schema], the sinks convert them, and
// stats, merge and resume read them back with [Check], [FileVersion] and
// [Rollouts]. Version 1's Arrow schema is kept, frozen, so that readers of
// light columns can tell and read files of that version. The step table
// (output.steps: one row per step of a kept trajectory) has a schema and
// a version of its own: [StepSchema], [StepsVersion], [StepRows]. It imports
// nothing of trajflow's but the data model in pipeline.
//
// The column tables ([Columns], [MessageFields], [StepColumns]: name, Arrow
// type, Parquet type, nullability, meaning) are the one place a column is
// defined: the Arrow schemas are built from them, the Parquet row types of
// sinks/parquet and SCHEMA.md's column tables are generated from them (go
// generate ./schema ./sinks/parquet; a test fails when a generated file
// is stale), and tests lock the collate stage and the decoders to them. The names of an output
// directory's folders and files ([DataDir], [StepsDir], [MetricsFile], …)
// and the Parquet key-value metadata keys ([MetadataKey], [KeyRunID], …)
// are defined here too.
package schema

//go:generate go run ./internal/gen -o ../SCHEMA.md
