package runstats

import (
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

// A group a stop cuts off leaves the error count and the errors by class
// in agreement: both forget its error members.
func TestCutOffKeepsCountsConsistent(t *testing.T) {
	s := NewCounters()
	var cut, kept pipeline.Group
	for i, st := range []pipeline.Status{pipeline.StatusError, pipeline.StatusError, pipeline.StatusOK, pipeline.StatusError} {
		r := &pipeline.Rollout{Status: st}
		if st == pipeline.StatusError {
			r.ErrorClass = "http"
			if i == 3 {
				r.ErrorClass = "timeout"
			}
		}
		s.Resolve(r)
		if i < 3 {
			cut.Rollouts = append(cut.Rollouts, r)
		} else {
			kept.Rollouts = append(kept.Rollouts, r)
		}
	}
	s.CutOff(&cut)
	sum := 0
	for _, n := range s.errClasses {
		sum += n
	}
	if s.errored.Load() != 1 || int64(sum) != s.errored.Load() || s.errClasses["timeout"] != 1 || s.errClasses["http"] != 0 || s.cancelled.Load() != 3 || s.ok.Load() != 0 {
		t.Fatalf("errors %d, by class %v, cancelled %d, ok %d", s.errored.Load(), s.errClasses, s.cancelled.Load(), s.ok.Load())
	}
}

// A rollout generated something when the server counted tokens, sent
// token ids, or (reporting neither) answered with content or tool calls.
func TestGenerated(t *testing.T) {
	for _, tt := range []struct {
		r    pipeline.Rollout
		want bool
	}{
		{pipeline.Rollout{}, false},
		{pipeline.Rollout{CompletionTokens: 3}, true},
		{pipeline.Rollout{ResponseTokenIDs: []int32{1}}, true},
		{pipeline.Rollout{Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "q"}, {Role: pipeline.RoleAssistant, Content: "a", Turn: 1}}}, true},
		{pipeline.Rollout{Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1, ToolCalls: []pipeline.ToolCall{{Name: "f"}}}}}, true},
		// A prompt's own assistant message (turn 0) is not generated.
		{pipeline.Rollout{Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Content: "example", Turn: 0}}}, false},
		{pipeline.Rollout{Messages: []pipeline.Message{{Role: pipeline.RoleAssistant, Turn: 1}}}, false},
	} {
		if got := generated(&tt.r); got != tt.want {
			t.Errorf("%+v: generated %v", tt.r, got)
		}
	}
}

// A run stopped by a failed commit (a full disk) says how many of its
// kept groups were committed: before, "65 kept" was printed when 32
// groups had reached a committed file.
func TestSummaryCountsCommittedGroups(t *testing.T) {
	s := &Summary{RunID: "r", Groups: 65, Kept: 65, CommittedGroups: 32, Rows: 128, Interrupted: true}
	want := "groups: 65 finished, 65 kept (32 of them committed; the other 33 were in files the run stopped before committing, and a resume redoes them)"
	if got := s.String(); !strings.Contains(got, want) {
		t.Errorf("summary:\n%s\nwant the line %q", got, want)
	}
	s.CommittedGroups, s.Rows = 65, 260
	if got := s.String(); strings.Contains(got, "of them committed") {
		t.Errorf("every kept group committed, and the summary says:\n%s", got)
	}
}
