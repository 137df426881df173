package inference

// API is generate.api: the API a client's requests go to, and with it
// what the generate stage holds of a trajectory. It decodes from YAML as
// the plain string. Each value is a registered Protocol (protocol.go);
// what an API can do is asked of its protocol (Caps), never by comparing
// it with a value.
type API string

// The values of generate.api that trajflow registers (inference/openai's
// protocol files). They name the values; what each does is its
// protocol's.
const (
	// APIChat sends messages to /v1/chat/completions (the default).
	APIChat API = "chat"
	// APICompletions sends a text prompt rendered from the messages to
	// /v1/completions.
	APICompletions API = "completions"
	// APITokens makes trajflow hold each trajectory's token ids: POST
	// /tokenize for the prompt and every observation, token-id prompts on
	// /v1/completions.
	APITokens API = "tokens"
	// APIBatch sends chat requests through the Batch API (/v1/files and
	// /v1/batches).
	APIBatch API = "batch"
	// APISGLang makes trajflow hold each trajectory's token ids as
	// APITokens does, and sends the prompts to SGLang's native POST
	// /generate: input_ids in, output_ids and meta_info logprobs out
	// (docs/engines.md).
	APISGLang API = "sglang"
)

// APIs returns the values of generate.api, in the order their protocols
// were registered (the default first).
func APIs() []API {
	reg.mu.RLock()
	defer reg.mu.RUnlock()
	out := make([]API, len(reg.order))
	for i, p := range reg.order {
		out[i] = p.API()
	}
	return out
}

// Valid reports whether a is one of APIs(): a registered protocol.
func (a API) Valid() bool {
	_, ok := ProtocolOf(a)
	return ok
}

// Caps is what a's protocol can guarantee; the zero Caps for an API no
// protocol registered.
func (a API) Caps() Caps {
	if p, ok := ProtocolOf(a); ok {
		return p.Caps()
	}
	return Caps{}
}

// Tokens reports whether a's protocol has the generate stage hold each
// trajectory's token ids and send them as the prompt (Caps.Tokens).
func (a API) Tokens() bool { return a.Caps().Tokens }

// Batch reports whether a's requests wait in Batch API batches, at the
// provider's batch price (Caps.Batch).
func (a API) Batch() bool { return a.Caps().Batch }

// Body is the API whose request body a's requests carry (Caps.Body: chat
// for the Batch API, whose lines are chat requests), a otherwise.
func (a API) Body() API {
	if b := a.Caps().Body; b != "" {
		return b
	}
	return a
}

// apiNames are APIs() as strings, for pipeline.Problems.OneOf.
func apiNames() []string {
	apis := APIs()
	s := make([]string, len(apis))
	for i, a := range apis {
		s[i] = string(a)
	}
	return s
}
