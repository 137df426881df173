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
package schema
