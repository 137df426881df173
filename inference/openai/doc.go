// Package openai is the inference client for OpenAI-compatible servers
// (vLLM, SGLang, hosted APIs): an inference.Client over a fleet of
// endpoints.
//
// NewHTTP builds the client from the generate section's inference.Config.
// It sends each request to one endpoint of the fleet (rendezvous hashing
// keeps a trajectory's turns on one server's prefix cache, the least loaded
// healthy endpoint takes the rest), retries with full-jitter backoff and
// the server's Retry-After, classifies every failure as an
// *inference.Error, probes unhealthy endpoints, and stops with ErrBroken
// when its circuit breaker opens. Preflight checks every endpoint before a
// run reads any data. The wire format (chat completions, completions with
// token ids, logprobs) is in wire.go, SGLang's native POST /generate
// (generate.api: sglang) in sglang.go; docs/inference.md describes the keys
// and docs/engines.md the engines.
package openai
