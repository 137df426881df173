// Package llm is trajflow's inference contract: a Request for one turn of one
// trajectory, the Response with what the model generated (text, tool calls,
// token ids, logprobs), and the Client that any backend implements — the
// OpenAI-compatible HTTP client of this package, or the built-in simulator.
package inference
