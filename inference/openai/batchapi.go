package openai

import "github.com/trajflow/trajflow/inference"

// batchAPI is generate.api: batch: chat requests through the Batch API
// (/v1/files and /v1/batches), sent by the BatchClient (batch.go), which
// the run's batch build step puts in place of the HTTP client; the HTTP
// client's requests under it are chat requests (trajflow validate's
// checks).
type batchAPI struct{ abortAll }

func (batchAPI) API() inference.API { return inference.APIBatch }

func (batchAPI) Caps() inference.Caps {
	return inference.Caps{Batch: true, Body: inference.APIChat}
}

func (batchAPI) Call(req *inference.Request) (*Call, error) { return openAICall(req, false) }
