package openai

import "github.com/trajflow/trajflow/inference"

// tokens is generate.api: tokens: the generate stage holds each
// trajectory's token ids (POST {root}/tokenize for the prompt and every
// observation) and sends them as token-id prompts to {base}/completions
// with return_token_ids (tokenParams); its requests without ids (the
// checks of trajflow validate) are chat requests.
type tokens struct{ abortAll }

func (tokens) API() inference.API { return inference.APITokens }

func (tokens) Caps() inference.Caps {
	return inference.Caps{Tokens: true, AbortContinues: true, RoutedExperts: true}
}

// Call is openAICall; a token-id request that asks for routed experts
// (generate.routed_experts) reads choices[0].routed_experts, which vLLM
// sends when started with --enable-return-routed-experts (no request
// field asks for them).
func (tokens) Call(req *inference.Request) (*Call, error) {
	c, err := openAICall(req, false)
	if err != nil || req.PromptTokenIDs == nil || !req.RoutedExperts {
		return c, err
	}
	c.Decode = func(data []byte) (*inference.Response, error) { return decodeOpenAI(data, req) }
	return c, nil
}
