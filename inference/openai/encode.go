package openai

import "github.com/trajflow/trajflow/inference"

// EncodeRequest is the JSON body the client sends for req under
// generate.api on the OpenAI API (a text prompt where api's protocol sends
// one, Caps.TextPrompt; token-id prompts as /v1/completions takes them):
// the bytes the response cache and the Batch API's custom_id hash.
func EncodeRequest(api inference.API, req *inference.Request) ([]byte, error) {
	return encodeRequest(req, api.Caps().TextPrompt)
}

// DecodeResponse parses an OpenAI chat or completions response body (as a
// Batch API output line's response.body carries it).
func DecodeResponse(body []byte) (*inference.Response, error) {
	return decodeResponse(body)
}
