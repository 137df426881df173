package openai

import "github.com/trajflow/trajflow/inference"

// completions is generate.api: completions: a text prompt to
// {base}/completions, the params' own prompt or every message's content
// concatenated (renderPrompt), without the server's chat template.
type completions struct{ abortAll }

func (completions) API() inference.API { return inference.APICompletions }

func (completions) Caps() inference.Caps { return inference.Caps{TextPrompt: true} }

func (completions) Call(req *inference.Request) (*Call, error) { return openAICall(req, true) }
