package inference

import (
	"fmt"
	"sync"
)

// Protocol is one value of generate.api, registered under its name: what
// its requests can guarantee (Caps). A backend adds its wire format (the
// HTTP client's path, request encoding, response decoding and abort:
// inference/openai's Protocol, which embeds this one); every other
// package asks the registered protocol, never compares an API with a
// value. A new engine API is one protocol file and one registration line
// (docs/architecture.md, "Where to add things").
type Protocol interface {
	// API is the generate.api value the protocol is registered under.
	API() API
	// Caps is what the protocol can guarantee.
	Caps() Caps
}

// Caps is what a protocol can guarantee, as the config's checks, the
// generate stage, validate and the run's statistics ask it.
type Caps struct {
	// Tokens: the generate stage holds each trajectory's token ids (the
	// prompt and every observation tokenized once by POST /tokenize) and
	// sends them as the prompt, so a row's ids are exactly the sequence
	// the model saw, and the prompt can be cut as ids (tokens, sglang).
	Tokens bool
	// TokenAPI is the API whose endpoint token-id prompts go to, as the
	// response cache keys them: the protocol's own (sglang's /generate),
	// or, empty, completions (/v1/completions).
	TokenAPI API
	// TokenPrompts names that endpoint in messages ("SGLang's
	// /generate"); empty: "/v1/completions".
	TokenPrompts string
	// TextPrompt: the prompt goes as text that trajflow renders from the
	// messages, without the server's chat template and without images
	// (completions).
	TextPrompt bool
	// Batch: requests wait in Batch API batches, at the provider's batch
	// price, single-turn, without a priority.
	Batch bool
	// Body is the API whose request body the requests carry when it is
	// another (the Batch API's lines are chat requests); empty: the
	// protocol's own.
	Body API
	// AbortContinues: a request aborted mid-answer (finish_reason abort,
	// with the tokens generated so far) continues token-in-token-out: the
	// partial ids are appended to the prompt's ids and the rest is asked
	// for (tokens, sglang; docs/policy.md). Without it the turn is sent
	// again from its start.
	AbortContinues bool
	// RoutedExperts: the protocol's token-id answers carry the experts a
	// mixture-of-experts engine routed each position to, when asked
	// (Request.RoutedExperts; tokens, sglang).
	RoutedExperts bool
}

// reg is the registry of protocols, by name and in registration order.
var reg struct {
	mu     sync.RWMutex
	byName map[API]Protocol
	order  []Protocol
}

// RegisterProtocol registers p under p.API(). It panics when the name is
// empty or taken: registration happens in init, and a clash is a
// programming error.
func RegisterProtocol(p Protocol) {
	name := p.API()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if name == "" {
		panic("inference: RegisterProtocol with an empty API name")
	}
	if _, dup := reg.byName[name]; dup {
		panic(fmt.Sprintf("inference: generate.api %q registered twice", name))
	}
	if reg.byName == nil {
		reg.byName = map[API]Protocol{}
	}
	reg.byName[name] = p
	reg.order = append(reg.order, p)
}

// ProtocolOf returns the protocol registered under a.
func ProtocolOf(a API) (Protocol, bool) {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	p, ok := reg.byName[a]
	return p, ok
}

// TokenAPI is the API whose endpoint a's token-id prompts go to
// (Caps.TokenAPI; completions when the protocol names none).
func (a API) TokenAPI() API {
	if t := a.Caps().TokenAPI; t != "" {
		return t
	}
	return APICompletions
}

// TokenPrompts names where a's token-id prompts go, for messages
// (Caps.TokenPrompts; "/v1/completions" when the protocol names none).
func (a API) TokenPrompts() string {
	if w := a.Caps().TokenPrompts; w != "" {
		return w
	}
	return "/v1/completions"
}
