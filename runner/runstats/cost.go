package runstats

import (
	"encoding/json"
	"sync/atomic"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sources"
)

// billed counts the tokens a run's requests were billed for, as its
// rollouts resolve (metrics.BilledOf), for the cost shown while it goes.
type billed struct {
	prompt, cached, completion atomic.Int64
}

func (b *billed) add(r *pipeline.Rollout) {
	t := metrics.BilledOf(r)
	b.prompt.Add(t.PromptTokens)
	b.cached.Add(t.CachedPromptTokens)
	b.completion.Add(t.CompletionTokens)
}

func (b *billed) load() metrics.Billed {
	return metrics.Billed{PromptTokens: b.prompt.Load(), CachedPromptTokens: b.cached.Load(), CompletionTokens: b.completion.Load()}
}

// prices are the run's prices per million tokens (generate.price; the
// Batch API's with generate.api: batch), nil without a price.
func (r *Tracker) prices() *metrics.Prices {
	g := &r.cfg.Generate
	if !g.Price.Set() {
		return nil
	}
	in, cached, out := g.Price.Resolved(g.API.Batch())
	return &metrics.Prices{InputPerMTok: in, CachedInputPerMTok: cached, OutputPerMTok: out}
}

// PriceMetadata is the Parquet metadata of the run's prices
// (schema.KeyPrice), nil without a price.
func (r *Tracker) PriceMetadata() map[string]string {
	p := r.prices()
	if p == nil {
		return nil
	}
	b, _ := json.Marshal(p)
	return map[string]string{schema.KeyPrice: string(b)}
}

// costNow is the cost of the requests resolved so far (not those answered
// from generate.cache: nothing was sent for them), what the cache's
// answers would have cost, and whether the run has a price.
func (r *Tracker) costNow() (cost, saved float64, ok bool) {
	p := r.prices()
	if p == nil {
		return 0, 0, false
	}
	hit := r.in.Hosted().CacheHitTokens
	return max(p.Cost(r.billed.load().Sub(hit)), 0), p.Cost(hit), true
}

// inputFraction is the share of the input read so far, when the source
// knows it.
func (r *Tracker) inputFraction() (float64, bool) {
	f, ok := r.in.Source().(sources.Fractioner)
	if !ok {
		return 0, false
	}
	return f.Fraction()
}

// ProjectedCost estimates what the whole run will cost at the cost per
// group so far: to groups.target kept groups at the keep rate, else to
// source.limit tasks, else to the end of the input at the share of it
// read (InputFraction); ok is false without a price or an estimate.
func (s Snapshot) ProjectedCost() (float64, bool) {
	if !s.Priced || s.GroupsFinished == 0 {
		return 0, false
	}
	done := float64(s.GroupsFinished)
	switch {
	case s.Target > 0 && s.GroupsKept > 0:
		return s.Cost * float64(s.Target) / float64(s.GroupsKept), true
	case s.TaskLimit > 0:
		return s.Cost * float64(s.TaskLimit-s.TasksResumed) / done, true
	case s.InputFraction > 0:
		total := float64(s.TasksRead)/s.InputFraction - float64(s.TasksResumed)
		return s.Cost * max(total, done) / done, true
	}
	return 0, false
}
