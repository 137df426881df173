package openai

import "github.com/trajflow/trajflow/inference"

// tokens is generate.api: tokens: the generate stage holds each
// trajectory's token ids (POST {root}/tokenize for the prompt and every
// observation) and sends them as token-id prompts to {base}/completions
// with return_token_ids (tokenParams); its requests without ids (the
// checks of trajflow validate) are chat requests.
type tokens struct{ abortAll }

func (tokens) API() inference.API { return inference.APITokens }

func (tokens) Caps() inference.Caps { return inference.Caps{Tokens: true, AbortContinues: true} }

func (tokens) Call(req *inference.Request) (*Call, error) { return openAICall(req, false) }
