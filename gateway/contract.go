package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// The APIs an agent's call may come in (Call.API).
const (
	AgentChat      = "chat"      // OpenAI Chat Completions: POST /v1/chat/completions
	AgentResponses = "responses" // OpenAI Responses: POST /v1/responses
	AgentMessages  = "messages"  // Anthropic Messages: POST /v1/messages
)

// Call is one model call of an agent, whatever API it came in, in
// trajflow's terms.
type Call struct {
	// API is the API the call came in (AgentChat, AgentResponses,
	// AgentMessages).
	API string
	// Messages is the whole conversation as the agent sent it, in order:
	// a system message first where the agent gave one (Anthropic's
	// system, the Responses API's instructions), tool results as
	// RoleTool messages with their ToolCallID, the model's earlier tool
	// calls as ToolCalls of assistant messages.
	Messages []pipeline.Message
	// Tools are the agent's tool definitions in Chat Completions' form
	// ({"type":"function","function":{"name","description","parameters"}}),
	// whatever API they came in.
	Tools []json.RawMessage
	// Params are the sampling parameters the agent set, under Chat
	// Completions' names: temperature, top_p, max_tokens (Anthropic's
	// max_tokens, the Responses API's max_output_tokens), stop (Anthropic's
	// stop_sequences), seed, tool_choice (in Chat Completions' form),
	// parallel_tool_calls. Parameters that do not change what the model
	// generates (stream, metadata, user, store) are not among them.
	Params map[string]any
	// Stream is whether the agent asked for a stream (the answer is
	// streamed to it whatever the engine does).
	Stream bool
}

// Answer is the model's answer to a Call.
type Answer struct {
	// Message is the assistant message: its text and tool calls (each
	// with an ID, a name and JSON arguments).
	Message pipeline.Message
	// FinishReason is Chat Completions' finish reason: "stop",
	// "length", "tool_calls".
	FinishReason string
	// StopSequence, when known, is the stop sequence that ended the
	// text (FinishReason "stop"); Anthropic's stop_reason is then
	// "stop_sequence". Optional.
	StopSequence string
	// PromptTokenIDs are the token ids the model saw for this call (the
	// prompt it generated Message.TokenIDs after); nil when unknown. Only
	// the NeMo Gym route (POST /v1/responses at the root) sends them, with
	// Message.TokenIDs and Message.Logprobs, as Gym's vllm_model's
	// prompt_token_ids, generation_token_ids and generation_log_probs;
	// the session routes stay plain OpenAI and Anthropic.
	PromptTokenIDs []int32
	// PromptTokens and CompletionTokens are the call's usage.
	PromptTokens     int
	CompletionTokens int
}

// Model answers a session's calls. The gateway calls it once per call
// the agent makes, from the request's goroutine, with a context that
// ends when the agent hangs up (or when Server.Close gives up waiting).
// Ending the session does not cancel it: End waits for the calls in
// flight. An error that is a *CallError is answered with its status and
// message in the API's own error shape; any other error is answered 502
// (a call whose agent hung up gets no answer).
type Model interface {
	Call(ctx context.Context, c *Call) (*Answer, error)
}

// ModelFunc is a function that is a Model.
type ModelFunc func(ctx context.Context, c *Call) (*Answer, error)

// Call calls f.
func (f ModelFunc) Call(ctx context.Context, c *Call) (*Answer, error) { return f(ctx, c) }

// CallError is a refusal of a call with an HTTP status (4xx for what the
// agent got wrong, 503 for a call that may be tried again later, 504 for
// a deadline).
type CallError struct {
	Status  int
	Message string
}

func (e *CallError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }
