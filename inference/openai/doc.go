// Package openai is the inference client for OpenAI-compatible servers
// (vLLM, SGLang, hosted APIs): an inference.Client over a fleet of
// endpoints.
//
// The HTTP client (HTTPClient, http.go) is the transport. NewHTTP builds
// it from the generate section's inference.Config. It sends each request
// to one endpoint of the fleet (fleet.go: rendezvous hashing keeps a
// trajectory's turns on one server's prefix cache, the least loaded
// healthy endpoint takes the rest), retries with full-jitter backoff and
// the server's Retry-After (retry.go), classifies every failure as an
// *inference.Error (classify.go), probes unhealthy endpoints (probe.go),
// stops with ErrBroken when its circuit breaker opens (breaker.go), aborts
// requests in flight (abort.go), learns each endpoint's context length
// (context.go), and tokenizes with the server's template (tokenize.go).
// Preflight checks every endpoint before a run reads any data.
//
// What goes on the wire is the protocol's: each generate.api value is a
// Protocol (protocol.go: its Call, the path, body and decoder of a request,
// and its abort bodies) registered with inference.RegisterProtocol, one
// file each with one line in protocols.go: chat.go, completions.go,
// tokens.go, batchapi.go (the Batch API's own client is batch.go) and
// sglang.go (SGLang's native POST /generate). The OpenAI wire format
// (chat completions, completions with token ids, logprobs) is in wire.go.
// docs/inference.md describes the keys and docs/engines.md the engines.
package openai
