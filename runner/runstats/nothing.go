package runstats

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// ErrNothingGenerated: the run resolved rollouts but no kept rollout
// generated a token (every first prompt refused as too long, say). What
// was committed is kept; the run is not a success.
var ErrNothingGenerated = errors.New("no kept rollout generated a token")

// generated reports whether r holds generated output: completion tokens
// counted by the server, response token ids, or (from a server that
// reports neither) an assistant message with content or tool calls.
func generated(r *pipeline.Rollout) bool {
	if r.CompletionTokens > 0 || len(r.ResponseTokenIDs) > 0 {
		return true
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Role == pipeline.RoleAssistant && m.Turn > 0 && (m.Content != "" || len(m.ToolCalls) > 0) {
			return true
		}
	}
	return false
}

// CheckGenerated returns ErrNothingGenerated, with what the rollouts
// resolved as, when this run resolved rollouts and none of its kept
// rollouts generated a token (nor, with no group kept, any rollout).
func (r *Tracker) CheckGenerated() error {
	s := r.Counters
	resolved := s.ok.Load() + s.errored.Load() + s.filtered.Load()
	if resolved == 0 || s.keptGenerated.Load() > 0 {
		return nil
	}
	s.mu.Lock()
	kept := s.kept
	classes := maps.Clone(s.errClasses)
	last := s.lastError
	s.mu.Unlock()
	if kept == 0 && s.completionTokens.Load() > 0 {
		// Tokens were generated and the keep rule dropped every group:
		// the summary says so.
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d rollouts resolved (%d ok, %d error)", resolved, s.ok.Load(), s.errored.Load())
	if len(classes) > 0 {
		b.WriteString(", errors by class:" + classCounts(classes))
	}
	if n := s.contextTruncated.Load(); n > 0 {
		fmt.Fprintf(&b, ", %d ended by the server's context-length refusal", n)
	}
	if last != "" {
		fmt.Fprintf(&b, "; last error: %s", last)
	}
	return fmt.Errorf("%w: %s", ErrNothingGenerated, b.String())
}
