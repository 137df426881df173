package inference

import (
	"errors"
	"slices"

	"github.com/trajflow/trajflow/pipeline"
)

// deltaUser and deltaReply are the fixed conversation whose renderings
// ObservationDelta compares; their contents occur in no real conversation,
// so that the reply's tokens are easy to find again.
var deltaUser = pipeline.Message{Role: pipeline.RoleUser, Content: "trajflow delta base question"}

const deltaReply = "trajflow delta base reply"

// ClosingConversations returns two renderings' worth of the fixed
// conversation that differ only in the reply's last word: the common
// suffix of their renderings (no generation prompt) is what the template
// writes after an assistant message's content (Qwen's "<|im_end|>\n"),
// the closing ObservationDelta appends after a reply the model did not
// finish.
func ClosingConversations() (a, b []pipeline.Message) {
	return []pipeline.Message{deltaUser, {Role: pipeline.RoleAssistant, Content: deltaReply + " one"}},
		[]pipeline.Message{deltaUser, {Role: pipeline.RoleAssistant, Content: deltaReply + " two"}}
}

// CommonSuffix returns the longest common suffix of a and b.
func CommonSuffix(a, b []int32) []int32 {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return a[len(a)-n:]
}

// DeltaConversation returns the fixed conversation to render without and
// with the new messages: a user message and an assistant reply that makes
// the tool calls of the trajectory's last assistant message (so that tool
// messages answering them render as they would in the trajectory).
func DeltaConversation(last *pipeline.Message) []pipeline.Message {
	reply := pipeline.Message{Role: pipeline.RoleAssistant, Content: deltaReply}
	if last != nil {
		reply.ToolCalls = last.ToolCalls
	}
	return []pipeline.Message{deltaUser, reply}
}

// maxClosing bounds the chat-template tokens that close an assistant
// message after its content (Qwen's "<|im_end|>\n" is 2).
const maxClosing = 8

// maxShift bounds how far into the longer rendering the fixed assistant
// reply may move when the template re-renders it (Qwen3 drops an empty
// "<think>\n\n</think>\n\n" from a reply once a user message follows).
const maxShift = 64

// ErrDeltaAlign says the two renderings of the fixed conversation could not
// be aligned: the template renders the fixed assistant reply too
// differently once messages follow it.
var ErrDeltaAlign = errors.New("the chat template renders the fixed conversation's assistant reply differently once messages follow it; cannot isolate the new messages' tokens")

// ObservationDelta returns the token ids that append new messages to a
// token sequence ending with a finished assistant turn: the chat-template
// rendering of only the new messages (with the generation prompt that
// follows them), never re-rendering anything earlier.
//
// without is the server's rendering of a fixed conversation ending with an
// assistant reply (DeltaConversation, no generation prompt); with is the
// rendering of the same conversation followed by the new messages, with
// the generation prompt. last is the last token id the model generated in
// the turn (its end-of-turn token), or a negative value when there is none.
// closing is what the template writes after an assistant message's content
// (see ClosingConversations), or nil when unknown.
//
// The result is the part of with after the fixed reply, preceded by what
// closes the trajectory's reply. When the closing is known, the reply
// ended with its end-of-turn token exactly when last is the closing's
// first token: the rest of the closing follows (the "\n" after Qwen's
// "<|im_end|>", which the model never generates). Any other reply (cut by
// max_tokens or a stop string, aborted, or empty) gets the whole closing
// ("<|im_end|>\n"), as the template closes every assistant turn. When the
// closing is unknown, the model's last token is looked for among the
// rendering's last few. Templates that render the fixed reply differently
// once messages follow it (Qwen3 drops an empty think block from earlier
// replies) are aligned on the reply's last tokens.
func ObservationDelta(without, with []int32, last int32, closing []int32) ([]int32, error) {
	l := commonPrefix(without, with)
	// end is the position in with that corresponds to len(without);
	// tail is where, in without, the part matched at end starts.
	end, tail := l, 0
	if l < len(without) {
		found := false
	search:
		for j := l; j < len(without); j++ {
			t := without[j:]
			for i := l; i <= l+maxShift && i+len(t) <= len(with); i++ {
				if equal(with[i:i+len(t)], t) {
					end, tail, found = i+len(t), j, true
					break search
				}
			}
		}
		if !found {
			return nil, ErrDeltaAlign
		}
	}
	known := len(closing) > 0 && len(closing) <= len(without)-tail && equal(without[len(without)-len(closing):], closing)
	if known {
		// The template's closing is known: the reply ended with its
		// end-of-turn token exactly when the model's last token is the
		// closing's first. Only then does the observation start with the
		// rest of the closing (Qwen's "\n" after "<|im_end|>"); a reply
		// that ended otherwise (cut by max_tokens, a stop string, an
		// abort) gets the whole closing first, as the template would have
		// closed the turn.
		if last == closing[0] {
			return with[end-(len(closing)-1):], nil
		}
		return slices.Concat(closing, with[end:]), nil
	}
	// The closing is unknown: the tokens after the model's end-of-turn
	// token, found among the rendering's last few.
	lo := max(tail, len(without)-maxClosing)
	if last >= 0 {
		for p := len(without) - 1; p >= lo; p-- {
			if without[p] == last {
				return with[end-(len(without)-1-p):], nil
			}
		}
	}
	return with[end:], nil
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// CommonPrefix returns the length of the longest common prefix of a and b.
func CommonPrefix(a, b []int32) int { return commonPrefix(a, b) }

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
