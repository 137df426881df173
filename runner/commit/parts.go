package commit

// The part sinks built in, each registered by its package's init
// (sinks.RegisterPart); the step rows register in steps.go. A new part
// sink is its package and one line here.
import (
	_ "github.com/trajflow/trajflow/sinks/jsonl"       // output.jsonl
	_ "github.com/trajflow/trajflow/sinks/openaibatch" // output.openai_batch
)
