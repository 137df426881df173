package generate

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// DefaultAbortGrace is how long an aborted request's answer is awaited
// after the servers acknowledged the abort, before the request is
// cancelled client side (Options.AbortGrace).
const DefaultAbortGrace = 5 * time.Second

// PolicyStats count what pauses did to the generate stage's requests.
type PolicyStats struct {
	// Aborted is the number of requests a pause in abort mode cut short
	// or cancelled.
	Aborted int64
	// Continued is the number of partial answers kept and continued after
	// the resume (generate.api tokens); ContinuedTokens their tokens.
	Continued       int64
	ContinuedTokens int64
	// Discarded is the number of generated tokens thrown away: partial
	// answers that could not be continued (chat or completions mode, a
	// step-wise request) and requests cancelled without an answer are
	// counted by their partial tokens (0 for a cancelled one).
	Discarded int64
	// Ranges is the number of spans recorded with a range of versions: a
	// request in flight while the version changed.
	Ranges int64
}

// policyState is the Generator's state for its policy.
type policyState struct {
	mu sync.Mutex
	// abortID identifies the pause the servers were last asked to abort
	// for (the pause's resume channel); abortCall is that call.
	abortID   <-chan struct{}
	abortCall *abortCall

	aborted, continued, continuedTokens, discarded, ranges atomic.Int64
}

type abortCall struct {
	done chan struct{}
	err  error
}

// PolicyStats returns the counters of what pauses did to the requests.
func (g *Generator) PolicyStats() PolicyStats {
	p := &g.policy
	return PolicyStats{
		Aborted: p.aborted.Load(), Continued: p.continued.Load(), ContinuedTokens: p.continuedTokens.Load(),
		Discarded: p.discarded.Load(), Ranges: p.ranges.Load(),
	}
}

// segment is a run of tokens of one answer and the versions that may have
// generated them.
type segment struct {
	n          int
	vmin, vmax int64
}

// errCancelledByPause is send's error for a request cancelled by a pause:
// r is not resolved, the turn is sent again after the resume.
var errCancelledByPause = errors.New("cancelled by a pause")

// admit records what r's first request is sent under: the policy version
// now and the sampling parameters.
func (g *Generator) admit(r *pipeline.Rollout) {
	if r.NumTurns > 0 || len(r.Steps) > 0 {
		return
	}
	r.AdmittedVersion = g.opts.Policy.Version()
	r.Sampling = samplingOf(inference.MergeParams(r.Task.Params, g.opts.Params))
}

// samplingOf reads the sampling parameters of a request's params.
func samplingOf(p map[string]any) pipeline.Sampling {
	var s pipeline.Sampling
	if v, ok := toFloat(p["temperature"]); ok {
		s.Temperature = &v
	}
	if v, ok := toFloat(p["top_p"]); ok {
		s.TopP = &v
	}
	if v, ok := toInt(p["top_k"]); ok {
		k := int32(v)
		s.TopK = &k
	}
	mt, ok := p["max_tokens"]
	if !ok {
		mt = p["max_completion_tokens"]
	}
	if v, ok := toInt(mt); ok {
		k := int32(v)
		s.MaxTokens = &k
	}
	return s
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case interface{ Float64() (float64, error) }:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// send sends req for r under the policy: it waits while the fleet is
// paused, and a pause in abort mode cuts the request where it is. In
// tokens mode (not step-wise) the partial answer is kept and the request
// continued from it after the resume, its prompt extended by the partial
// ids and max_tokens reduced by their number; otherwise the turn is sent
// again from its start. It returns the whole answer (the parts joined) and
// its segments by version. A nil response means r resolved (a failure) or
// ctx ended (the error).
func (g *Generator) send(ctx context.Context, r *pipeline.Rollout, req *inference.Request, stepwise bool) (*inference.Response, []segment, error) {
	pol := g.opts.Policy
	if pol == nil {
		resp, err := g.complete(ctx, ctx, r, req)
		if resp == nil {
			return nil, nil, err
		}
		return resp, []segment{{n: len(resp.Message.TokenIDs)}}, nil
	}
	continuable := g.opts.API.Caps().AbortContinues && !stepwise && req.PromptTokenIDs != nil && !constrained(req.Params)
	var parts []*inference.Response
	var segs []segment
	for {
		if err := pol.Wait(ctx); err != nil {
			return nil, nil, err
		}
		v := pol.Version()
		resp, cut, err := g.watched(ctx, r, req)
		vEnd := pol.Version()
		if resp == nil && !errors.Is(err, errCancelledByPause) {
			return nil, nil, err
		}
		if cut {
			g.policy.aborted.Add(1)
		}
		if resp == nil {
			continue // cancelled without an answer: send it again
		}
		if vEnd != v {
			g.policy.ranges.Add(1)
		}
		n := len(resp.Message.TokenIDs)
		if resp.FinishReason != inference.FinishAbort {
			parts = append(parts, resp)
			segs = append(segs, segment{n: n, vmin: v, vmax: vEnd})
			return joinParts(parts), segs, nil
		}
		if !continuable {
			g.policy.discarded.Add(int64(n))
			continue
		}
		if n == 0 {
			continue
		}
		g.policy.continued.Add(1)
		g.policy.continuedTokens.Add(int64(n))
		parts = append(parts, resp)
		segs = append(segs, segment{n: n, vmin: v, vmax: vEnd})
		next := *req
		next.PromptTokenIDs = slices.Concat(req.PromptTokenIDs, resp.Message.TokenIDs)
		next.Params = maps(req.Params)
		if left, limited := reduceMaxTokens(next.Params, n); limited && left <= 0 {
			// The partial answer used up max_tokens: the turn is done.
			last := *resp
			last.FinishReason = "length"
			parts[len(parts)-1] = &last
			return joinParts(parts), segs, nil
		}
		req = &next
	}
}

// constrained reports whether p's response_format constrains the output
// (json_object, json_schema). Such a turn aborted by a pause is sent
// again from its start: a server's constrained decoding starts its
// grammar at a continuation's first token, and the structured-output
// check (inference/structured) sees a whole answer only so.
func constrained(p map[string]any) bool {
	rf, ok := p["response_format"].(map[string]any)
	if !ok {
		return false
	}
	t, _ := rf["type"].(string)
	return t != "" && t != "text"
}

// maps copies a params map.
func maps(p map[string]any) map[string]any {
	out := make(map[string]any, len(p))
	for k, v := range p {
		out[k] = v
	}
	return out
}

// reduceMaxTokens takes n off p's max_tokens (or max_completion_tokens)
// and returns what is left; limited is false when p sets neither.
func reduceMaxTokens(p map[string]any, n int) (left int, limited bool) {
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := toInt(p[k]); ok {
			p[k] = v - n
			return v - n, true
		}
	}
	return 0, false
}

// joinParts joins the answers of a request continued after aborts into
// one: the ids, logprobs and text in order, the usage summed, the last
// part's finish reason and trailer, the first part's prompt.
func joinParts(parts []*inference.Response) *inference.Response {
	if len(parts) == 1 {
		return parts[0]
	}
	last := parts[len(parts)-1]
	out := *last
	out.PromptTokenIDs = parts[0].PromptTokenIDs
	out.PromptTokens, out.CompletionTokens = 0, 0
	var ids []int32
	var lps []float32
	var content string
	for _, p := range parts {
		ids = append(ids, p.Message.TokenIDs...)
		lps = append(lps, stepLogprobs(p.Message)...)
		content += p.Message.Content
		out.PromptTokens += p.PromptTokens
		out.CompletionTokens += p.CompletionTokens
	}
	out.Message.TokenIDs, out.Message.Logprobs, out.Message.Content = ids, lps, content
	return &out
}

// watched sends req while watching the policy: a pause in abort mode asks
// the servers to abort their requests (once per pause, inference.Aborter)
// and, when they cannot or the answer does not come within the grace,
// cancels the request. cut reports that a pause in abort mode caught the
// request in flight.
func (g *Generator) watched(ctx context.Context, r *pipeline.Rollout, req *inference.Request) (resp *inference.Response, cut bool, err error) {
	sendCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	var caught atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.watch(sendCtx, cancel, done, &caught)
	}()
	resp, err = g.complete(ctx, sendCtx, r, req)
	close(done)
	wg.Wait()
	return resp, caught.Load(), err
}

// watch is watched's watcher; it returns when done is closed.
func (g *Generator) watch(ctx context.Context, cancel context.CancelFunc, done <-chan struct{}, caught *atomic.Bool) {
	pol := g.opts.Policy
	for {
		ch := pol.Changed()
		if paused, mode, id := pol.pause(); paused && mode == PauseAbort {
			caught.Store(true)
			if err := g.abortServers(ctx, id); err != nil {
				cancel()
				return
			}
			grace := g.opts.AbortGrace
			if grace <= 0 {
				grace = DefaultAbortGrace
			}
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				cancel()
			case <-ctx.Done():
			}
			return
		}
		select {
		case <-ch:
		case <-done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// errNoAbort: the client has no abort call.
var errNoAbort = errors.New("the inference client cannot abort requests")

// abortServers asks the servers to abort their requests, once for the
// pause id; every caller waits for that one call. The client's backend
// aborts them through its decorators (inference.AborterOf).
func (g *Generator) abortServers(ctx context.Context, id <-chan struct{}) error {
	ab, ok := inference.AborterOf(g.client)
	if !ok {
		return errNoAbort
	}
	p := &g.policy
	p.mu.Lock()
	if p.abortID != id {
		call := &abortCall{done: make(chan struct{})}
		p.abortID, p.abortCall = id, call
		go func() {
			actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			call.err = ab.Abort(actx)
			close(call.done)
		}()
	}
	call := p.abortCall
	p.mu.Unlock()
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tagVersions records the versions of the tokens of r's last answer,
// segs in order from its first token, in r.PolicyVersions.
func tagVersions(r *pipeline.Rollout, segs []segment) {
	last := lastAssistant(r.Messages)
	if last < 0 {
		return
	}
	m := &r.Messages[last]
	pos, end := m.TokenStart, m.TokenEnd
	for _, s := range segs {
		if pos >= end {
			return
		}
		e := min(pos+int32(s.n), end)
		if e > pos {
			addSpan(r, pipeline.VersionSpan{Version: s.vmin, VersionMax: s.vmax, Start: pos, End: e})
		}
		pos = e
	}
}

// noteAnswered records the oldest version an answer of segs was requested
// under (r.AnsweredVersion): a row's staleness where its answer has no
// token positions to tag (chat mode without token ids, step-wise turns).
func noteAnswered(r *pipeline.Rollout, segs []segment) {
	for _, s := range segs {
		r.NoteAnswered(s.vmin)
	}
}

// addSpan appends s to r's spans, merged into the last one when it
// continues it with the same versions.
func addSpan(r *pipeline.Rollout, s pipeline.VersionSpan) {
	if n := len(r.PolicyVersions); n > 0 {
		l := &r.PolicyVersions[n-1]
		if l.End == s.Start && l.Version == s.Version && l.VersionMax == s.VersionMax {
			l.End = s.End
			return
		}
	}
	r.PolicyVersions = append(r.PolicyVersions, s)
}

// cutSpans cuts r's spans to the first n positions of its sequence.
func cutSpans(r *pipeline.Rollout, n int32) {
	out := r.PolicyVersions[:0]
	for _, s := range r.PolicyVersions {
		if s.Start >= n {
			break
		}
		s.End = min(s.End, n)
		out = append(out, s)
	}
	r.PolicyVersions = out
}
