// Package inference is trajflow's inference contract: a Request for one
// turn of one trajectory, the Response with what the model generated
// (text, tool calls, token ids, logprobs), the Client that any backend
// implements (the OpenAI-compatible HTTP client of inference/openai, the
// built-in simulator of inference/sim), and the generate section's Config
// with its API (generate.api).
package inference
