package schema

// BatchStateFile is the output directory's record of the Batch API
// batches a run planned and submitted (generate.api: batch): JSON lines,
// appended and synced before each step it records is taken.
const BatchStateFile = "batches.jsonl"
