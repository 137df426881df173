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
	// BatchInputPerMTok and BatchOutputPerMTok are the prices through a
	// provider's Batch API (usually half), which a run that sends its
	// requests as batches pays instead; 0: the same as the prices above.
	BatchInputPerMTok  float64 `yaml:"batch_input_per_mtok"`
	BatchOutputPerMTok float64 `yaml:"batch_output_per_mtok"`
}

// Set reports whether any price is given.
func (p Price) Set() bool { return p != Price{} }

// Cost is the price of prompt tokens (cached of them served from the
// provider's prompt cache) and completion tokens; batch selects the Batch
// API's prices (where given).
func (p Price) Cost(prompt, cached, completion int64, batch bool) float64 {
	in, out := p.InputPerMTok, p.OutputPerMTok
	cachedIn := in
	if p.CachedInputPerMTok > 0 {
		cachedIn = p.CachedInputPerMTok
	}
	cached = min(max(cached, 0), prompt)
	if batch {
		if p.BatchInputPerMTok > 0 {
			in = p.BatchInputPerMTok
		}
		if p.BatchOutputPerMTok > 0 {
			out = p.BatchOutputPerMTok
		}
	}
	return (float64(prompt-cached)*in + float64(cached)*cachedIn + float64(completion)*out) / 1e6
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
