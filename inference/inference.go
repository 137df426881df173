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
	// Extra is machine-readable data the server attached beyond the OpenAI
	// fields (the simulator's trailer); nil from most servers.
	Extra json.RawMessage
	// Endpoint names the endpoint that answered.
	Endpoint string
}

// Client generates one response.
type Client interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
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
