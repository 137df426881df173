// Package openaibatch writes OpenAI's Batch output and error files
// (output.openai_batch, docs/offline.md) beside the Parquet parts: a part
// sink registered with package sinks (sinks.RegisterPart), staged with
// each part, committed and aborted with it, and paired with the committed
// parts at a resume (Pair). Each row has one line: the server's reply as
// the body of its response, or an error.
package openaibatch
