// Package commit is a run's commit path: the Parquet writer of each
// output directory, the step rows committed with each data file
// (output.steps), the OpenAI Batch files beside each part
// (output.openai_batch), the images stored before the rows that name them
// (output.images: reference), the interop sinks of the kept rows
// (output.jsonl, output.arrow_stream) and the upload of what each commit
// wrote to object storage (Hooks.Upload). Its order is fixed; see
// Committer.
package commit
