// Package inference is trajflow's inference contract: a Request for one
// turn of one trajectory, the Response with what the model generated
// (text, tool calls, token ids, logprobs), the Client that any backend
// implements (the OpenAI-compatible HTTP client of inference/openai, the
// built-in simulator of inference/sim), and the generate section's Config
// with its API (generate.api).
//
// Each value of generate.api is a Protocol registered under its name
// (RegisterProtocol, protocol.go): what its requests can guarantee
// (Caps: token ids held and exact, a text prompt, the Batch API,
// continuation after an abort). The protocols register from
// inference/openai, which adds each one's wire format; the config's
// checks, the generate stage, validate and the run ask API.Caps (or
// Tokens, Batch, Body, TokenAPI) and never compare an API with a value.
package inference
