package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// AgentTurn runs one model call an agent made through the gateway as a
// turn of r: msgs are the whole conversation the agent sent, tools its
// tool definitions and params its request parameters (laid under the
// config's, as a row's own are). When msgs extend the current segment's
// messages and answers, the new messages are the turn's observations (in
// tokens mode their ids the template's rendering of them, loss mask 0);
// when they do not (the agent summarised, cut or edited its history), a
// new segment starts (r.Segments): its messages are rendered whole after
// the previous segment's tokens and sent alone, and no continuity break is
// counted. Failures resolve r as Turn's do; AgentTurn returns an error
// only when ctx is done.
func (g *Generator) AgentTurn(ctx context.Context, r *pipeline.Rollout, msgs []pipeline.Message, tools []json.RawMessage, params map[string]any) error {
	r.CallParams = params
	r.Tools = tools
	before := *r
	seg := segmentStart(r)
	next, ok := extends(msgs, r.Messages[seg:])
	switch {
	case len(r.Messages) == 0:
		r.Messages = appendTurn(r.Messages, msgs, 0)
	case ok:
		r.Messages = appendTurn(r.Messages, msgs[next:], r.NumTurns)
	default:
		tok := int32(len(r.PromptTokenIDs) + len(r.ResponseTokenIDs))
		if r.TokenIDsMissing || tok == 0 {
			tok = -1
		}
		r.Segments = append(r.Segments, pipeline.Segment{Message: int32(len(r.Messages)), Token: tok, Turn: int32(r.NumTurns + 1)})
		r.Messages = appendTurn(r.Messages, msgs, r.NumTurns)
	}
	err := g.Turn(ctx, r)
	if err != nil && !r.Done() {
		// The call was abandoned (the agent hung up, the trajectory
		// ended): nothing of it stays, so that the agent's retry of it is
		// the same turn.
		restore(r, &before)
	}
	return err
}

// restore takes r's conversation and token view back to before, a copy
// of r made before a turn whose answer never came.
func restore(r, before *pipeline.Rollout) {
	r.Messages = before.Messages[:len(before.Messages):len(before.Messages)]
	r.Segments = before.Segments[:len(before.Segments):len(before.Segments)]
	r.PromptTokenIDs = before.PromptTokenIDs
	n := len(before.ResponseTokenIDs)
	r.ResponseTokenIDs = r.ResponseTokenIDs[:n:n]
	r.LossMask = r.LossMask[:n:n]
	r.ResponseLogprobs = r.ResponseLogprobs[:n:n]
	r.EnvTokens = before.EnvTokens
	r.Routes = before.Routes // Merge never writes the routes it was given
	r.Truncated = before.Truncated
}

// appendTurn appends copies of msgs to dst as messages of the given turn,
// without token spans (the turn sets them).
func appendTurn(dst, msgs []pipeline.Message, turn int) []pipeline.Message {
	for _, m := range msgs {
		m.Turn = turn
		m.TokenStart, m.TokenEnd = 0, 0
		m.TokenIDs, m.Logprobs = nil, nil
		dst = append(dst, m)
	}
	return dst
}

// segmentStart is the index in r.Messages of the current segment's first
// message.
func segmentStart(r *pipeline.Rollout) int {
	if n := len(r.Segments); n > 0 {
		return int(r.Segments[n-1].Message)
	}
	return 0
}

// segmentToken is the position in r's sequence of the current segment's
// first token (0 for the first segment, or where it has none).
func segmentToken(r *pipeline.Rollout) int {
	if n := len(r.Segments); n > 0 && r.Segments[n-1].Token > 0 {
		return int(r.Segments[n-1].Token)
	}
	return 0
}

// freshSegment reports whether r's current segment is a new one (not the
// first) with no answer yet: its prompt is rendered whole.
func freshSegment(r *pipeline.Rollout) bool {
	n := len(r.Segments)
	return n > 0 && int(r.Segments[n-1].Turn) == r.NumTurns+1
}

// extends reports whether the conversation msgs starts with prev, the
// current segment's messages and answers: the same roles, texts, tool
// calls and tool results in order; and if so, next, the index in msgs of
// the first message after prev. Consecutive assistant messages count as
// one on both sides (an SDK may send an answer's parts as separate
// messages: its text and its tool calls, or its text blocks), so next
// counts msgs' own messages, not the merged ones; an answer's text is
// compared without surrounding white space, and tool-call arguments as
// JSON values.
func extends(msgs, prev []pipeline.Message) (next int, ok bool) {
	a, ends := coalesce(msgs)
	b, _ := coalesce(prev)
	if len(a) < len(b) {
		return 0, false
	}
	for i := range b {
		if !sameMessage(a[i], b[i]) {
			return 0, false
		}
	}
	if len(b) == 0 {
		return 0, true
	}
	return ends[len(b)-1], true
}

// coalesce merges runs of assistant messages into one; ends[i] is the
// index in msgs after the last message merged into out[i].
func coalesce(msgs []pipeline.Message) (out []pipeline.Message, ends []int) {
	out = make([]pipeline.Message, 0, len(msgs))
	ends = make([]int, 0, len(msgs))
	for i, m := range msgs {
		if n := len(out); n > 0 && m.Role == pipeline.RoleAssistant && out[n-1].Role == pipeline.RoleAssistant {
			last := &out[n-1]
			last.Content = strings.TrimSpace(last.Content + m.Content)
			last.ToolCalls = append(slices.Clip(last.ToolCalls), m.ToolCalls...)
			ends[n-1] = i + 1
			continue
		}
		out = append(out, m)
		ends = append(ends, i+1)
	}
	return out, ends
}

func sameMessage(a, b pipeline.Message) bool {
	if a.Role != b.Role || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	if a.Role == pipeline.RoleAssistant {
		if strings.TrimSpace(a.Content) != strings.TrimSpace(b.Content) {
			return false
		}
	} else if a.Content != b.Content {
		return false
	}
	for i := range a.ToolCalls {
		x, y := a.ToolCalls[i], b.ToolCalls[i]
		if x.Name != y.Name || !sameJSON(x.Arguments, y.Arguments) {
			return false
		}
	}
	return true
}

// sameJSON reports whether a and b are the same JSON value (or, when
// either is not JSON, the same text).
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	p, _ := json.Marshal(x)
	q, _ := json.Marshal(y)
	return bytes.Equal(p, q)
}
