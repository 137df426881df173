package openai

import "github.com/trajflow/trajflow/inference"

// chat is generate.api: chat (the default): messages to
// {base}/chat/completions; the server renders them with its chat
// template. Token ids, logprobs and usage are what the server returns
// (vLLM's return_token_ids; docs/engines.md).
type chat struct{ abortAll }

func (chat) API() inference.API { return inference.APIChat }

func (chat) Caps() inference.Caps { return inference.Caps{} }

func (chat) Call(req *inference.Request) (*Call, error) { return openAICall(req, false) }
