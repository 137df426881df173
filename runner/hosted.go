package runner

import (
	"github.com/trajflow/trajflow/inference/openai"
)

// hostedStats are the hosted-API figures of the run's client; none before
// it is built.
func (r *run) hostedStats() HostedStats {
	if p := r.live.Load(); p != nil {
		return p.built.Hosted()
	}
	return HostedStats{}
}

// httpClient is the run's HTTP client, for its endpoints' figures; nil
// for the simulator, an embedder's client, or before the client is built.
func (r *run) httpClient() *openai.HTTPClient {
	if p := r.live.Load(); p != nil {
		return p.built.HTTP()
	}
	return nil
}
