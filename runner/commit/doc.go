// Package commit is a run's commit path: the Parquet writer of each
// output directory, the part sinks whose files are committed with each
// part (a list built from the registry of package sinks,
// sinks.RegisterPart: the step rows of output.steps, registered in
// steps.go, and the packages parts.go imports: the NeMo Gym JSONL of
// output.jsonl, the OpenAI Batch files of output.openai_batch), their
// pairing before a resume (Pair), the images stored before the rows that
// name them (output.images: reference), the interop sink of the kept rows
// (output.arrow_stream) and the upload of what each commit wrote to object
// storage (Hooks.Upload). Its order is fixed; see Committer.
package commit
