package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trajflow/trajflow/pipeline"
)

// Request is one generation for one trajectory turn.
type Request struct {
	Model    string
	Messages []pipeline.Message
	// Params are the request's body parameters, already merged (the row's
	// values, then the config's): temperature, top_p, max_tokens, stop, seed,
	// and any server extras (logprobs, return_token_ids, ...).
	Params map[string]any
	// Tools are OpenAI function-calling tool definitions.
	Tools []json.RawMessage
	// Affinity keeps related requests on one endpoint (the trajectory's, or
	// preferably its group's, prefix cache). Empty means no preference.
	Affinity string
	// PromptTokenIDs, when not nil, is the prompt itself as token ids
	// (generate.api: tokens): the request goes to /v1/completions with
	// prompt set to these ids and return_token_ids set, Messages and Tools
	// are not sent, and the response must carry the generated ids.
	PromptTokenIDs []int32
	// Sample names the sample the request belongs to (the trajectory's
	// id), telling apart requests whose bodies are the same (the samples
	// of a group without seeds). The response cache and the Batch API's
	// custom_id key on it with the body. Empty: the body alone.
	Sample string
	// API, when set (APIChat or APICompletions), sends the request to
	// that API in place of the client's generate.api: an OpenAI Batch
	// line's url.
	API API
	// Priority, when not nil, is the request's scheduling priority for
	// engines that take one (vLLM with --scheduling-policy priority,
	// SGLang with priority scheduling): sent as the body's priority; lower
	// values are scheduled first. nil sends none (generate.priority: off,
	// or an engine without the field).
	Priority *int
	// RoutedExperts asks the engine for the experts it routed each
	// position of the prompt and the answer to (generate.routed_experts):
	// the protocols that can (tokens, sglang) ask for them where the
	// engine takes a request field, and decode them into Response.Routes.
	// RoutedExpertsLayers is the model's MoE layer count where the
	// engine's answer does not say it (SGLang's flat buffer); 0: unknown.
	RoutedExperts       bool
	RoutedExpertsLayers int
}

// TokenizeRequest asks for the token ids of a conversation rendered by the
// server's own chat template (vLLM's and SGLang's POST /tokenize).
type TokenizeRequest struct {
	Model    string
	Messages []pipeline.Message
	Tools    []json.RawMessage
	// AddGenerationPrompt appends the template's assistant header, as the
	// prompt of a generation ends.
	AddGenerationPrompt bool
	// Raw, when set, asks for the ids of Text alone, without the chat
	// template or special tokens ({"prompt": Text, "add_special_tokens":
	// false}); Messages, Tools, AddGenerationPrompt and TemplateArgs are
	// then not sent.
	Raw  bool
	Text string
	// TemplateArgs are the request's template parameters
	// (TemplateArgs of its params: chat_template_kwargs, chat_template,
	// add_special_tokens), sent as the body's keys of those names so that
	// the ids are those a chat request with the same params would get.
	TemplateArgs map[string]any
	// Affinity keeps the call on the endpoint of the trajectory's
	// generations (one tokenizer per fleet is assumed, but a server is
	// never asked about a template it does not serve).
	Affinity string
}

// Tokenizer renders and tokenizes a conversation with the server's chat
// template. Backends that can (vLLM, SGLang, the simulator) implement it
// beside Client; generate.api: tokens needs it.
type Tokenizer interface {
	Tokenize(ctx context.Context, req *TokenizeRequest) ([]int32, error)
}

// Detokenizer turns token ids back into text (vLLM's and SGLang's POST
// /detokenize). trajflow validate uses it to show a rendered prompt.
type Detokenizer interface {
	Detokenize(ctx context.Context, model string, ids []int32) (string, error)
}

// ContextLimiter is a backend that knows the model's context length
// (vLLM's max_model_len, as its /tokenize and /v1/models report it;
// Ollama's context, from /api/ps or /api/show): the most tokens a prompt
// and its completion may hold. MaxModelLen is 0 while unknown (a backend
// learns it from its first /tokenize answer, or after a chat answer where
// the server publishes it).
type ContextLimiter interface {
	MaxModelLen() int
}

// Response is what the model generated.
type Response struct {
	// Message is the assistant message: content, tool calls, and where the
	// server reports them, token ids and logprobs.
	Message pipeline.Message
	// PromptTokenIDs are the prompt's token ids as the server tokenized them
	// (vLLM's return_token_ids); nil when the server does not report them.
	PromptTokenIDs   []int32
	FinishReason     string
	PromptTokens     int
	CompletionTokens int
	// CachedPromptTokens are the prompt tokens the server served from its
	// prompt cache (usage.prompt_tokens_details.cached_tokens), 0 when it
	// does not say.
	CachedPromptTokens int
	// Extra is machine-readable data the server attached beyond the OpenAI
	// fields (the simulator's trailer); nil from most servers.
	Extra json.RawMessage
	// Endpoint names the endpoint that answered.
	Endpoint string
	// Raw is the reply's body as the server sent it, and RequestID the
	// server's x-request-id, when the client keeps them (the HTTP client's
	// KeepBody; the OpenAI Batch output writes them); nil and "" otherwise.
	Raw       json.RawMessage
	RequestID string
	// Discarded are the tokens of the replies to the same request thrown
	// away before this one (the structured-output check's tries).
	Discarded Usage
	// Routes are the experts the engine routed the positions of the
	// request's prompt ++ the generated tokens to, from the prompt's
	// first token on (the last generated token is never routed: the
	// engine did not run it through the model); nil when the request did
	// not ask (Request.RoutedExperts) or the engine sent none.
	Routes *pipeline.Routes
}

// Client generates one response.
type Client interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}

// Decorate returns outer, a client wrapping inner, with inner's Tokenize,
// Detokenize and MaxModelLen where inner has them (Tokenizer, Detokenizer,
// ContextLimiter), and inner itself for AborterOf (Unwrapper): a decorator
// (rate limits, the response cache, the structured-output check) keeps
// what its backend can do.
func Decorate(outer, inner Client) Client {
	w := wraps{inner}
	t, tok := inner.(Tokenizer)
	d, det := inner.(Detokenizer)
	l, lim := inner.(ContextLimiter)
	switch {
	case tok && det && lim:
		return struct {
			Client
			wraps
			Tokenizer
			Detokenizer
			ContextLimiter
		}{outer, w, t, d, l}
	case tok && det:
		return struct {
			Client
			wraps
			Tokenizer
			Detokenizer
		}{outer, w, t, d}
	case tok && lim:
		return struct {
			Client
			wraps
			Tokenizer
			ContextLimiter
		}{outer, w, t, l}
	case det && lim:
		return struct {
			Client
			wraps
			Detokenizer
			ContextLimiter
		}{outer, w, d, l}
	case tok:
		return struct {
			Client
			wraps
			Tokenizer
		}{outer, w, t}
	case det:
		return struct {
			Client
			wraps
			Detokenizer
		}{outer, w, d}
	case lim:
		return struct {
			Client
			wraps
			ContextLimiter
		}{outer, w, l}
	}
	if _, ok := AborterOf(inner); ok {
		return struct {
			Client
			wraps
		}{outer, w}
	}
	return outer
}

// Unwrapper is a decorated client (Decorate's result): Unwrap returns the
// client it wraps.
type Unwrapper interface {
	Unwrap() Client
}

// wraps is Decorate's Unwrapper.
type wraps struct{ inner Client }

func (w wraps) Unwrap() Client { return w.inner }

// AborterOf returns c's abort call: c's own when c is an Aborter, else
// that of the client a decorator wraps (Unwrapper), as deep as they go. A
// decorator leaves the abort to its backend: the requests in flight
// answer through it with their partial outputs.
func AborterOf(c Client) (Aborter, bool) {
	for c != nil {
		if a, ok := c.(Aborter); ok {
			return a, true
		}
		u, ok := c.(Unwrapper)
		if !ok {
			return nil, false
		}
		c = u.Unwrap()
	}
	return nil, false
}

// Error classes, written to the output's error_class column.
const (
	ClassHTTP          = "http"           // a non-retryable HTTP status
	ClassRateLimited   = "rate_limited"   // 429 after the last retry
	ClassServer        = "server"         // 5xx after the last retry
	ClassConnection    = "connection"     // reset, refused, EOF
	ClassTimeout       = "timeout"        // deadline per request
	ClassBadResponse   = "bad_response"   // unparseable body
	ClassContextLength = "context_length" // the prompt no longer fits
	ClassCancelled     = "cancelled"
)

// Error is a failed generation with its class.
type Error struct {
	Class  string
	Status int // HTTP status, 0 when none
	Msg    string
	// Discarded are the tokens of the replies the request got and threw
	// away before it failed (the structured-output check's tries).
	Discarded Usage
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Class, e.Status, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Class, e.Msg)
}

// ErrorClass returns err's class, "" for nil and "internal" for errors that
// carry none.
func ErrorClass(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	if errors.Is(err, context.Canceled) {
		return ClassCancelled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTimeout
	}
	return "internal"
}

// FinishAbort is the finish reason of a response the server cut short
// because it was asked to abort its requests (Aborter): the response holds
// the tokens generated until then.
const FinishAbort = "abort"

// Aborter is a client whose servers can abort the requests in flight, as
// SGLang's POST /abort_request does with abort_all: each request aborted
// answers with the tokens it generated so far and finish reason
// FinishAbort. Abort returns once every server acknowledged the call; an
// error says which server could not (it has no such call, or failed), and
// the caller cancels those requests itself.
type Aborter interface {
	Abort(ctx context.Context) error
}
