// Package sim is trajflow's simulated inference server: a model of a
// continuous-batching server (vLLM V1 style) that answers OpenAI-compatible
// requests with deterministic text, token ids and logprobs, either
// in-process (Server implements inference.Client) or over HTTP (Server.Handler,
// `trajflow sim-server`).
//
// The timing model: a running set R of at most Capacity requests and a FIFO
// queue. Each step admits what fits from the queue and lasts
//
//	dt = A + C·|R| + P·(prompt tokens admitted this step)
//
// and every running request emits one token per step. Between events the
// batch is constant, so the server never sleeps per step: it computes the
// time of the next completion and waits for that, re-planning at the next
// step boundary when a request arrives or leaves. A, C, P (and environment
// delays in the trailer) are multiplied by Options.TimeScale; a time scale of
// 0 answers at once.
//
// Every random draw is a hash of the simulator seed and a key: the prompt key
// (the messages up to the first user message), the sample key (the request's
// seed) and the turn (assistant messages so far). The same request always
// gets the same reply, whatever the schedule.
//
// Token ids come from a small lossless toy tokenizer (see Tokenize), and the
// chat rendering keeps token continuity: turn k+1's prompt ids start with
// turn k's prompt ids followed by turn k's generated ids when the client
// sends the assistant message back unchanged.
//
// With Options.MoE the model is a mixture of experts whose answers carry
// the experts each position was routed to (MoE.Route, a hash of the seed,
// the layer, the position and the token id), in vLLM's and SGLang's wire
// formats (EncodeNPYRoutes, EncodeSGLangRoutes), for router replay tests.
//
// Over HTTP each API is an api of its own, as the client's protocols are
// (inference/openai): the OpenAI API's chat and completions (openAIAPI,
// http.go) and SGLang's native /generate (nativeAPI, native.go) each read
// a request body into the model's input and write the answer; the serving
// around them (the body read, rate limits, faults, the scheduler, the
// charge) is one (Server.handle, Server.answer). A new API is its function
// and one route in Handler.
package sim
