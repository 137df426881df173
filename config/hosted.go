package config

import (
	"strings"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/storage"
)

// validateHosted checks the keys of hosted-API generation: rate limits,
// the response cache and the Batch API.
func (c *Config) validateHosted(p *pipeline.Problems) {
	g := &c.Generate
	p.Section("generate.rate_limit", g.RateLimit.Validate())
	p.Section("generate.batch", g.Batch.Validate())
	switch {
	case storage.IsURL(g.Cache):
		p.Add("generate.cache", "%q: a local directory only for now (object storage is not supported for the response cache)", g.Cache)
	case g.Cache == "" && g.CacheMaxBytes != 0:
		p.Add("generate.cache_max_bytes", "has no effect without generate.cache")
	}
	if g.CacheMaxBytes < 0 {
		p.Add("generate.cache_max_bytes", "must be >= 0 (0: no bound), got %d", g.CacheMaxBytes)
	}
	if !g.API.Batch() {
		return
	}
	for i, e := range g.Endpoints {
		if strings.HasPrefix(e, inference.SimScheme) {
			p.Add("generate.endpoints", "generate.api: batch needs an HTTP server with the Batch API (endpoints[%d] is %s): run `trajflow sim-server` and name its URL for an offline one", i, e)
			break
		}
	}
	if storage.IsURL(c.Output.Dir) {
		p.Add("output.dir", "generate.api: batch records its batches in the output directory (batches.jsonl) so that a restart collects them instead of submitting again; an s3:// output.dir is staged in a temporary directory that a restart does not find: use a local output.dir")
	}
	if g.RateLimit.Enabled() {
		p.Add("generate.rate_limit", "applies to requests sent one by one; generate.api: batch sends batches, which the provider queues under its own batch limits")
	}
	if g.Structured.Retries() > 0 && !g.Structured.RetriesVary() {
		p.Add("generate.invalid_retries", "is %d with generate.invalid_retry_seed false and no generate.invalid_retry_params: a retry would send the same body with the same custom_id to the Batch API, which answers it as before and bills it again; set invalid_retry_seed: true, invalid_retry_params, or invalid_retries: 0", g.Structured.Retries())
	}
	if st, ok := g.Params["stream"].(bool); ok && st {
		p.Add("generate.params.stream", "the Batch API answers whole responses; remove the key")
	}
	if c.Prompt.MaxTokens > 0 {
		p.Add("prompt.max_tokens", "counts the prompt with POST /tokenize, which generate.api: batch does not use")
	}
	const why = "generate.api: batch is single-turn: a batch takes minutes to hours, and each further turn would wait for a batch of its own; set env.max_turns: 1 (or use generate.api: chat for multi-turn)"
	// No environment (envs.None: an OpenAI Batch file's requests without
	// an env section) is one turn, whatever max_turns says.
	singleTurn := func(name string, maxTurns int) bool { return maxTurns == 1 || name == envs.None }
	if len(c.Env.Routes) == 0 {
		if !singleTurn(c.Env.Name, c.Env.MaxTurns) {
			p.Add("env.max_turns", "%s", why)
		}
		return
	}
	for name, r := range c.Env.Routes {
		if r != nil && !singleTurn(r.Name, r.MaxTurns) {
			p.Add("env.routes."+name+".max_turns", "%s", why)
		}
	}
}
