// Package gateway is the agent gateway: an HTTP server that speaks the
// APIs agents' SDKs speak (OpenAI Chat Completions and Responses,
// Anthropic Messages) and turns each call of a session into a Call that
// a Model answers. Each rollout of an agent environment is one session,
// with its own base URL and unguessable key; an unmodified SDK needs
// only the base URL and the key.
//
// # Lifecycle
//
//	srv := gateway.New(gateway.Options{Model: "policy"})
//	srv.Start()                  // listens on 127.0.0.1, a free port
//	s := srv.Open(model)         // one session per rollout
//	... the agent calls s.OpenAIBaseURL / s.AnthropicBaseURL with s.Key ...
//	s.End()                      // refuses later calls, waits for those in flight
//	srv.Close(ctx)               // ends every session, stops listening
//
// End does not cancel the Model contexts of calls in flight: it waits
// for them. Close waits too, until its ctx ends; then it cancels them.
// A Model's context ends when the agent hangs up (such a call gets no
// answer).
//
// # Routes
//
// Every route is under /s/{id}/, {id} being the session's id (32 hex
// digits from crypto/rand):
//
//	POST /s/{id}/v1/chat/completions   OpenAI Chat Completions, streamed or not
//	POST /s/{id}/v1/responses          OpenAI Responses, streamed or not
//	POST /s/{id}/v1/messages           Anthropic Messages, streamed or not
//	GET  /s/{id}/v1/models             the OpenAI model list: Options.Model
//	GET  /s/{id}/v1/models/{model}     one model (404 for another name)
//	POST /s/{id}/reward                {"reward": x}: what Session.Reward returns (the last one wins)
//
// Session.OpenAIBaseURL is http://ADDR/s/ID/v1, AnthropicBaseURL is
// http://ADDR/s/ID (the Anthropic SDK appends /v1/messages).
//
// One route is at the root, for NeMo Gym's agent servers, which are
// configured with their model server's address before a run and send no
// key:
//
//	POST /v1/responses   NeMo Gym's model server (vllm_model), not streamed
//
// Its call is attributed to a session by metadata.trajflow_session (the
// session's id, GymSessionKey), which Gym's simple agent forwards from
// the row's responses_create_params with every call; a call without it
// is refused 400, one naming a session that is unknown or ended 404
// (param metadata.trajflow_session), never guessed. It is answered as
// Gym's vllm_model answers: the Responses API's response whose last
// output item carries prompt_token_ids (Answer.PromptTokenIDs),
// generation_token_ids and generation_log_probs (the answer's TokenIDs
// and Logprobs), all three or none (an answer without ids or logprobs).
// The session routes never carry them.
//
// Whatever the API, the Model sees one Call: the whole conversation as
// pipeline.Messages (a system message first for a system or developer
// message, Anthropic's system, the Responses API's instructions; the
// model's earlier tool calls as ToolCalls of assistant messages; tool
// results as RoleTool messages with their ToolCallID), the tools in Chat
// Completions' form and the sampling parameters under Chat Completions'
// names. The Model answers whole; when the agent asked for a stream the
// gateway streams that answer: text in deltas of about 64 bytes, tool
// call arguments in deltas too, in the API's own events (Chat's chunks
// and data: [DONE], honouring stream_options.include_usage; the
// Responses API's response.* events with sequence_number; Anthropic's
// message_start ... message_stop with event: lines).
//
// # Auth
//
// A call carries the session's key as Authorization: Bearer KEY (OpenAI
// SDKs) or x-api-key: KEY (Anthropic's), either on any route, compared
// in constant time. A session id that is unknown or whose session ended
// is 404; a known session with a missing or wrong key is 401. Neither
// touches any session. No key is ever written to a response or a log
// line.
//
// # Errors
//
// Errors come in each API's own shape. OpenAI's (chat, responses,
// models, reward):
//
//	{"error":{"message":"messages[1].tool_call_id: no earlier tool call has id \"x\"","type":"invalid_request_error","param":"messages[1].tool_call_id","code":null}}
//
// with type authentication_error (401), not_found_error (404),
// rate_limit_error (429), server_error (5xx), else invalid_request_error.
// Anthropic's (messages):
//
//	{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: missing: Messages requires max_tokens"}}
//
// with type authentication_error, not_found_error, request_too_large
// (413), overloaded_error (503, 529), api_error (other 5xx), else
// invalid_request_error. A message starts with the field at fault.
//
// A Model's *CallError is answered with its status and message; any
// other Model error is answered 502 with a message that says only that
// the model call failed (the error itself goes to the log).
//
// # What is refused
//
// The gateway refuses with 400 what it cannot honour rather than ignore
// it silently: n > 1; logit_bias, logprobs and top_logprobs (no logprobs
// are returned); audio and modalities other than text; predicted
// outputs, web search, the legacy functions/function_call; images,
// audio and files in any content (text only); tools other than function
// tools (Responses' web_search, file_search...; Anthropic's server
// tools); previous_response_id, conversation, item_reference input
// items and stored prompts (the gateway keeps no server state: every
// call carries its whole conversation); background: true; Anthropic's
// extended thinking. It also refuses malformed calls: invalid JSON, an
// empty conversation, an unknown role, a missing model (Chat, Messages),
// a missing max_tokens (Messages), a max_tokens that is not a positive
// integer, and a tool result (tool message, function_call_output,
// tool_result) whose id no earlier tool call of the same request has.
// A body over Options.MaxBody (32 MiB by default) is 413; a wrong method
// is 405.
//
// Fields that change nothing the gateway answers are accepted and
// ignored: metadata, user, store, service_tier, stream_options (but
// include_usage), truncation, include (but output text logprobs),
// reasoning items echoed back. response_format (Chat) and text.format
// (Responses) of type json_object or json_schema pass to the Model in
// Params["response_format"] (in Chat's form), a reasoning effort in
// Params["reasoning_effort"].
//
// An answer's tool call whose arguments are not a JSON object cannot be
// an Anthropic tool_use block (its input is an object): such an answer
// is refused 502 (api_error) on the Messages route rather than guessed
// at; empty arguments are {}. Answer.StopSequence, when the Model knows
// it, makes Anthropic's stop_reason stop_sequence.
//
// # Stats
//
// Server.Stats counts the calls that reached a Model (by API), the
// requests refused before, the calls a Model failed, the sessions opened
// and open, and the gateway's own latency per answered call (handler
// time less the time in Model.Call) from a fixed-bucket histogram.
package gateway
