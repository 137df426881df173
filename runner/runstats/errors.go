package runstats

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Failed are the rollouts that resolved as errors, and all those that
// resolved (ok, filtered or error), for run.max_error_rate.
func (s *Counters) Failed() (errs, done int64) {
	errs = s.errored.Load()
	return errs, s.ok.Load() + s.filtered.Load() + errs
}

// Read counts a task read from the input, Resumed one an earlier run
// committed, Dispatched rollouts sent into the pipeline, Rejected a bad
// input row; InvalidUTF8 counts a row whose invalid UTF-8 was replaced
// and returns the count.
func (s *Counters) Read()              { s.tasks.Add(1) }
func (s *Counters) Resumed()           { s.skipped.Add(1) }
func (s *Counters) Dispatched(n int)   { s.dispatched.Add(int64(n)) }
func (s *Counters) Rejected()          { s.rejected.Add(1) }
func (s *Counters) InvalidUTF8() int64 { return s.invalidUTF8.Add(1) }

// TopErrors names the most frequent error classes, for a message.
func (s *Counters) TopErrors() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.errClasses
	if len(m) == 0 {
		return ""
	}
	all := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range all[:min(3, len(all))] {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	msg := "; by class: " + strings.Join(parts, ", ")
	if s.lastError != "" {
		msg += "; last: " + s.lastError
	}
	return msg
}

// Refail counts a resolved rollout (ok or error) as failing anew, of
// class with msg: an ok one becomes an error, an error one changes class.
func (s *Counters) Refail(ro *pipeline.Rollout, class, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ro.Status {
	case pipeline.StatusOK:
		s.ok.Add(-1)
		s.errored.Add(1)
	case pipeline.StatusError:
		s.errClasses[ro.ErrorClass]--
		if s.errClasses[ro.ErrorClass] <= 0 {
			delete(s.errClasses, ro.ErrorClass)
		}
	default:
		return
	}
	s.errClasses[class]++
	s.lastError = msg
}
