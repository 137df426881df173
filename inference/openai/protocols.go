package openai

import "github.com/trajflow/trajflow/inference"

// The protocols of generate.api, one line each, in the order
// inference.APIs lists them (the default first). A new engine API is its
// protocol file and one line here (docs/architecture.md).
func init() {
	inference.RegisterProtocol(chat{})
	inference.RegisterProtocol(completions{})
	inference.RegisterProtocol(tokens{})
	inference.RegisterProtocol(batchAPI{})
	inference.RegisterProtocol(sglang{})
}
