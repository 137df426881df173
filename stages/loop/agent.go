package loop

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/generate"
)

// Sessions opens gateway sessions: the agent gateway (gateway.Server)
// implements it.
type Sessions interface {
	Open(m gateway.Model) envs.Session
}

// drive runs r's agent (an envs.Agent route) to its end: it opens a
// gateway session whose calls are r's turns, runs the agent, and resolves
// r. Each call takes one of the loop's agent-call slots (GenWorkers of
// them) while it generates; the calls of one session are taken in turn.
// It returns an error only when ctx was cancelled.
func (l *Loop) drive(ctx context.Context, r *pipeline.Rollout) error {
	if l.opts.Sessions == nil {
		r.Fail("env", fmt.Errorf("env %s is an agent environment, and this run has no gateway", r.Env))
		return nil
	}
	// The agent writes its own prompts: its calls are the trajectory.
	r.Messages, r.PromptTokenIDs = nil, nil
	var mu sync.Mutex
	maxTurns := l.env.MaxTurns(r)
	model := gateway.ModelFunc(func(reqCtx context.Context, c *gateway.Call) (*gateway.Answer, error) {
		mu.Lock()
		defer mu.Unlock()
		if r.Done() {
			return nil, &gateway.CallError{Status: http.StatusBadRequest, Message: "this trajectory has ended (" + ended(r) + "): it takes no more model calls"}
		}
		if maxTurns > 0 && r.NumTurns >= maxTurns {
			r.MaxTurnsReached = true
			return nil, &gateway.CallError{Status: http.StatusBadRequest, Message: fmt.Sprintf("env.max_turns (%d) reached: this trajectory takes no more model calls", maxTurns)}
		}
		// The call ends when the agent hangs up or the trajectory ends.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(reqCtx, cancel)
		defer stop()
		select {
		case l.agentSlots <- struct{}{}:
		case <-cctx.Done():
			return nil, callEnded(ctx)
		}
		defer func() { <-l.agentSlots }()
		turns, promptTokens, completion := r.NumTurns, r.PromptTokens, r.CompletionTokens
		l.genBusy.Add(1)
		err := l.gen.AgentTurn(cctx, r, c.Messages, c.Tools, c.Params)
		l.genBusy.Add(-1)
		if err != nil {
			return nil, callEnded(ctx)
		}
		if r.NumTurns == turns {
			return nil, refusal(r)
		}
		msg, prompt := answerTokens(r)
		return &gateway.Answer{
			Message:          msg,
			PromptTokenIDs:   prompt,
			FinishReason:     r.FinishReason,
			PromptTokens:     r.PromptTokens - promptTokens,
			CompletionTokens: r.CompletionTokens - completion,
		}, nil
	})
	sess := l.opts.Sessions.Open(model)
	return l.env.Drive(ctx, r, sess)
}

// callEnded is the refusal of a call whose trajectory's context ended.
func callEnded(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &gateway.CallError{Status: http.StatusGatewayTimeout, Message: "the trajectory reached its timeout (env.timeout)"}
	}
	return &gateway.CallError{Status: http.StatusServiceUnavailable, Message: "the call was abandoned"}
}

// refusal is the answer to a call that resolved r without an answer.
func refusal(r *pipeline.Rollout) error {
	status := http.StatusBadGateway
	if r.ErrorClass == generate.ClassPromptTooLong || r.Truncated {
		status = http.StatusBadRequest
	}
	return &gateway.CallError{Status: status, Message: "the model call failed: " + ended(r)}
}

// ended says how r resolved, for the agent.
func ended(r *pipeline.Rollout) string {
	switch {
	case r.Status == pipeline.StatusError:
		return r.ErrorClass + ": " + r.Error
	case r.Truncated:
		return "the sequence reached max_seq_len"
	}
	return string(r.Status)
}

// answerTokens is r's last message (the answer of the call just made)
// with its generated ids and logprobs, and the ids the model saw for the
// call: the current segment's tokens before the answer. Without ids (the
// engine reported none) the message is as kept and the prompt nil.
func answerTokens(r *pipeline.Rollout) (pipeline.Message, []int32) {
	msg := r.Messages[len(r.Messages)-1]
	if r.TokenIDsMissing || msg.TokenEnd <= msg.TokenStart {
		return msg, nil
	}
	row := r.Tokens()
	start, end := 0, int(msg.TokenStart)
	if n := len(r.Segments); n > 0 && r.Segments[n-1].Token > 0 {
		start = int(r.Segments[n-1].Token)
	}
	if end > len(row) || int(msg.TokenEnd) > len(row) || start > end {
		return msg, nil
	}
	p := len(r.PromptTokenIDs)
	if end < p {
		return msg, nil
	}
	msg.TokenIDs = slices.Clone(row[msg.TokenStart:msg.TokenEnd])
	msg.Logprobs = nil
	if int(msg.TokenEnd)-p <= len(r.ResponseLogprobs) {
		msg.Logprobs = slices.Clone(r.ResponseLogprobs[int(msg.TokenStart)-p : int(msg.TokenEnd)-p])
	}
	return msg, slices.Clone(row[start:end])
}
