package inference

// API is generate.api: the API a client's requests go to, and with it
// what the generate stage holds of a trajectory. It decodes from YAML as
// the plain string.
type API string

// The values of generate.api.
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

// APIs returns the values of generate.api, the default first.
func APIs() []API { return []API{APIChat, APICompletions, APITokens, APIBatch, APISGLang} }

// Valid reports whether a is one of APIs().
func (a API) Valid() bool {
	switch a {
	case APIChat, APICompletions, APITokens, APIBatch, APISGLang:
		return true
	}
	return false
}

// Tokens reports whether a is APITokens or APISGLang: the generate stage
// holds each trajectory's token ids and sends them as the prompt.
func (a API) Tokens() bool { return a == APITokens || a == APISGLang }

// Batch reports whether a is APIBatch: requests wait in Batch API
// batches, at the provider's batch price.
func (a API) Batch() bool { return a == APIBatch }

// Body is the API whose request body a's requests carry: APIChat for
// APIBatch (the Batch API's lines are chat requests), a otherwise.
func (a API) Body() API {
	if a == APIBatch {
		return APIChat
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
