package metrics

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Prices are what a provider charges per million tokens (generate.price,
// resolved for the API the run used), as a run records them in each
// Parquet file it writes (schema.KeyPrice).
type Prices struct {
	InputPerMTok       float64 `json:"input_per_mtok"`
	CachedInputPerMTok float64 `json:"cached_input_per_mtok,omitempty"`
	OutputPerMTok      float64 `json:"output_per_mtok"`
}

// Billed are the tokens a provider bills for: every prompt and completion
// token the requests spent, the replies thrown away and sent again
// included, and of the prompt tokens those served from its prompt cache.
type Billed struct {
	PromptTokens       int64 `json:"prompt_tokens"`
	CachedPromptTokens int64 `json:"cached_prompt_tokens"`
	CompletionTokens   int64 `json:"completion_tokens"`
}

// BilledOf is what r's requests were billed for: its prompt and
// completion tokens, and those of the replies thrown away
// (pipeline.MetricDiscardedPromptTokens, ...), with the cached prompt
// tokens (pipeline.MetricCachedPromptTokens).
func BilledOf(r *pipeline.Rollout) Billed {
	return Billed{
		PromptTokens:       int64(r.PromptTokens) + int64(r.Metrics[pipeline.MetricDiscardedPromptTokens]),
		CachedPromptTokens: int64(r.Metrics[pipeline.MetricCachedPromptTokens]),
		CompletionTokens:   int64(r.CompletionTokens) + int64(r.Metrics[pipeline.MetricDiscardedCompletionTokens]),
	}
}

// Add returns the sum of b and c.
func (b Billed) Add(c Billed) Billed {
	return Billed{b.PromptTokens + c.PromptTokens, b.CachedPromptTokens + c.CachedPromptTokens, b.CompletionTokens + c.CompletionTokens}
}

// Sub returns b less c.
func (b Billed) Sub(c Billed) Billed {
	return Billed{b.PromptTokens - c.PromptTokens, b.CachedPromptTokens - c.CachedPromptTokens, b.CompletionTokens - c.CompletionTokens}
}

// Cost is the price of b's tokens: the cached prompt tokens at
// CachedInputPerMTok (InputPerMTok when 0), the others at InputPerMTok,
// the completion tokens at OutputPerMTok.
func (p Prices) Cost(b Billed) float64 {
	cachedIn := p.CachedInputPerMTok
	if cachedIn == 0 {
		cachedIn = p.InputPerMTok
	}
	cached := min(max(b.CachedPromptTokens, 0), b.PromptTokens)
	return (float64(b.PromptTokens-cached)*p.InputPerMTok + float64(cached)*cachedIn + float64(b.CompletionTokens)*p.OutputPerMTok) / 1e6
}

// Cost is what the rows cost, in the currency of the prices
// (generate.price): present when any row was written with a price. Read
// from an output directory, it covers every row its runs paid for: those
// of data/ and those committed beside them (filtered/, surplus/,
// errors/: an error row's tokens, its thrown-away replies' included, were
// paid too), split in Dirs.
type Cost struct {
	// Total is the cost of the rows that have a price.
	Total float64 `json:"total"`
	// PricedRows counts the rows written with a price (the others, written
	// without generate.price, cost nothing here).
	PricedRows int64 `json:"priced_rows"`
	// Billed are the tokens of the priced rows.
	Billed Billed `json:"billed"`
	// Dirs splits Total by the directory the rows were committed to
	// (data, filtered, surplus, errors); absent where only data rows were
	// read (Parquet files named one by one).
	Dirs map[string]DirCost `json:"dirs,omitempty"`
}

// DirCost is the cost of one directory's priced rows.
type DirCost struct {
	Total      float64 `json:"total"`
	PricedRows int64   `json:"priced_rows"`
}

// Add returns c and d summed, Dirs merged.
func (c Cost) Add(d Cost) Cost {
	out := Cost{Total: c.Total + d.Total, PricedRows: c.PricedRows + d.PricedRows, Billed: c.Billed.Add(d.Billed)}
	for _, m := range []map[string]DirCost{c.Dirs, d.Dirs} {
		for k, v := range m {
			if out.Dirs == nil {
				out.Dirs = map[string]DirCost{}
			}
			o := out.Dirs[k]
			out.Dirs[k] = DirCost{Total: o.Total + v.Total, PricedRows: o.PricedRows + v.PricedRows}
		}
	}
	return out
}

// Includes says which rows Total covers: "data 12, errors 3 rows", say.
func (c Cost) Includes() string {
	if len(c.Dirs) == 0 {
		return fmt.Sprintf("%d rows", c.PricedRows)
	}
	var parts []string
	for _, k := range []string{schema.DataDir, schema.FilteredDir, schema.SurplusDir, schema.ErrorsDir} {
		if d, ok := c.Dirs[k]; ok && d.PricedRows > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, d.PricedRows))
		}
	}
	return strings.Join(parts, ", ") + " rows"
}

// FormatCost shows a cost: 4 decimals from 1 up, else 4 significant
// digits (0.0001234), so that a small run's cost is not 0.0000.
func FormatCost(v float64) string {
	if v >= 1 || v <= 0 {
		return fmt.Sprintf("%.4f", v)
	}
	digits := 3 - int(math.Floor(math.Log10(v)))
	return strconv.FormatFloat(v, 'f', min(digits, 12), 64)
}
