package inference

import "github.com/trajflow/trajflow/pipeline"

// Price is what a provider charges, in a currency of the user's choosing
// (USD, as providers list it), per million tokens.
type Price struct {
	// InputPerMTok is the price of a million prompt tokens.
	InputPerMTok float64 `yaml:"input_per_mtok"`
	// OutputPerMTok is the price of a million completion tokens.
	OutputPerMTok float64 `yaml:"output_per_mtok"`
	// CachedInputPerMTok is the price of a million prompt tokens the
	// provider served from its prompt cache (the rows'
	// cached_prompt_tokens metric, from each reply's
	// usage.prompt_tokens_details.cached_tokens); 0: InputPerMTok.
	CachedInputPerMTok float64 `yaml:"cached_input_per_mtok"`
	// BatchInputPerMTok is the price of a million prompt tokens through
	// the provider's Batch API (usually half of InputPerMTok), which a run
	// with generate.api: batch pays instead; 0: InputPerMTok.
	BatchInputPerMTok float64 `yaml:"batch_input_per_mtok"`
	// BatchOutputPerMTok is the price of a million completion tokens
	// through the provider's Batch API; 0: OutputPerMTok.
	BatchOutputPerMTok float64 `yaml:"batch_output_per_mtok"`
}

// Set reports whether any price is given.
func (p Price) Set() bool { return p != Price{} }

// Resolved are the prices per million tokens a run pays: with batch (a
// run whose requests go through the provider's Batch API) the batch
// prices where given; the cached input price is InputPerMTok where not
// given.
func (p Price) Resolved(batch bool) (input, cachedInput, output float64) {
	input, output = p.InputPerMTok, p.OutputPerMTok
	if batch {
		if p.BatchInputPerMTok > 0 {
			input = p.BatchInputPerMTok
		}
		if p.BatchOutputPerMTok > 0 {
			output = p.BatchOutputPerMTok
		}
	}
	cachedInput = p.CachedInputPerMTok
	if cachedInput == 0 {
		cachedInput = input
	}
	return input, cachedInput, output
}

// Validate reports every problem of the prices at once.
func (p Price) Validate() error {
	var pr pipeline.Problems
	for _, k := range []struct {
		key string
		v   float64
	}{{"input_per_mtok", p.InputPerMTok}, {"output_per_mtok", p.OutputPerMTok}, {"cached_input_per_mtok", p.CachedInputPerMTok},
		{"batch_input_per_mtok", p.BatchInputPerMTok}, {"batch_output_per_mtok", p.BatchOutputPerMTok}} {
		if !(k.v >= 0) {
			pr.Add(k.key, "must be >= 0, got %v", k.v)
		}
	}
	return pr.Err()
}
