package generate

import (
	"context"
	"github.com/trajflow/trajflow/inference"
	"slices"
	"time"

	"github.com/trajflow/trajflow/pipeline"
)

// Generator runs model turns.
type Generator struct {
	client inference.Client
	model  string
	params map[string]any
}

// New returns a Generator sending params (the config's generate.params,
// merged over each row's own) to client.
func New(client inference.Client, model string, params map[string]any) *Generator {
	return &Generator{client: client, model: model, params: params}
}

// Turn runs one generation for r. Failures resolve r (error, or truncated
// for a context-length error); Turn itself returns an error only when ctx is
// done.
func (g *Generator) Turn(ctx context.Context, r *pipeline.Rollout) error {
	req := &inference.Request{
		Model:    g.model,
		Messages: r.Messages,
		Params:   g.requestParams(r),
		Tools:    r.Tools,
		Affinity: r.GroupID,
	}
	start := time.Now()
	resp, err := g.client.Complete(ctx, req)
	r.GenTime += time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if inference.ErrorClass(err) == inference.ClassContextLength {
			r.Truncated = true
			r.FinishReason = "context_length"
			r.Resolve(pipeline.StatusOK)
			return nil
		}
		r.Fail(inference.ErrorClass(err), err)
		return nil
	}
	g.apply(r, resp)
	return nil
}

// requestParams merges the row's parameters, the config's, and the
// rollout's own seed and stop strings.
func (g *Generator) requestParams(r *pipeline.Rollout) map[string]any {
	p := inference.MergeParams(r.Task.Params, g.params) // a new map
	p["seed"] = r.Seed
	if len(r.StopStrings) > 0 {
		p["stop"] = r.StopStrings
	}
	return p
}

// apply appends the response to the trajectory.
func (g *Generator) apply(r *pipeline.Rollout, resp *inference.Response) {
	turn := r.NumTurns + 1
	r.NumTurns = turn
	r.PromptTokens += resp.PromptTokens
	r.CompletionTokens += resp.CompletionTokens
	r.FinishReason = resp.FinishReason
	r.Extra = resp.Extra
	r.ToolCalls += len(resp.Message.ToolCalls)

	g.trackTokens(r, resp)

	msg := resp.Message
	msg.Role = pipeline.RoleAssistant
	msg.Turn = turn
	r.Messages = append(r.Messages, msg)
}

// trackTokens extends the trajectory's token view with this turn's prompt
// extension (observation tokens, loss mask 0) and generated tokens (loss
// mask 1). Each turn's prompt should begin with every token of the
// trajectory so far; when it does not, the break is counted and the
// extension is not guessed (no re-tokenizing).
func (g *Generator) trackTokens(r *pipeline.Rollout, resp *inference.Response) {
	p := resp.PromptTokenIDs
	switch {
	case p == nil:
		// The server reports no prompt ids: nothing to check.
	case r.NumTurns == 1:
		r.PromptTokenIDs = p
	default:
		n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
		if len(p) >= n && slices.Equal(p[:len(r.PromptTokenIDs)], r.PromptTokenIDs) && slices.Equal(p[len(r.PromptTokenIDs):n], r.ResponseTokenIDs) {
			ext := p[n:]
			r.ResponseTokenIDs = append(r.ResponseTokenIDs, ext...)
			r.LossMask = append(r.LossMask, make([]int8, len(ext))...)
			r.ResponseLogprobs = append(r.ResponseLogprobs, make([]float32, len(ext))...)
			r.EnvTokens += len(ext)
			// The extension belongs to the messages since the last
			// assistant message: give it to the last of them.
			if i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != pipeline.RoleAssistant && r.Messages[i].TokenIDs == nil {
				r.Messages[i].TokenIDs = ext
			}
		} else {
			r.TokenContinuityBreaks++
		}
	}
	ids := resp.Message.TokenIDs
	if len(ids) == 0 {
		return
	}
	n := len(ids)
	lp := resp.Message.Logprobs
	if len(lp) != n {
		lp = make([]float32, n) // no logprobs: zeros
	}
	if len(r.ResponseTokenIDs) == 0 && len(r.LossMask) == 0 && len(r.ResponseLogprobs) == 0 {
		// The first generated tokens: share the response's arrays (capped,
		// so that a later turn's append copies rather than writes into
		// them) instead of copying them.
		r.ResponseTokenIDs = ids[:n:n]
		r.LossMask = ones(n)
		r.ResponseLogprobs = lp[:n:n]
		return
	}
	r.ResponseTokenIDs = append(r.ResponseTokenIDs, ids...)
	r.LossMask = append(r.LossMask, ones(n)...)
	r.ResponseLogprobs = append(r.ResponseLogprobs, lp...)
}

// ones returns n ones.
func ones(n int) []int8 {
	mask := make([]int8, n)
	for i := range mask {
		mask[i] = 1
	}
	return mask
}
