package groups

import "sync"

// Supply is the demand of a continuous run (trajflow serve): the number of
// kept groups, counted over the whole output (earlier runs' included),
// that the run is to have produced. A Controller that follows a Supply
// (Follow) never reaches a target: when the kept groups meet the demand it
// admits nothing new and waits until Raise asks for more, and the groups
// in flight then keep running and count toward the next demand, so no
// finished work is surplus. It is safe for concurrent use.
type Supply struct {
	mu     sync.Mutex
	target int
	wakes  []func()
}

// NewSupply returns a supply asking for target kept groups.
func NewSupply(target int) *Supply { return &Supply{target: max(target, 0)} }

// Raise asks for at least target kept groups in all; a lower target than
// the current one is ignored (demand only grows).
func (s *Supply) Raise(target int) {
	s.mu.Lock()
	if target <= s.target {
		s.mu.Unlock()
		return
	}
	s.target = target
	wakes := s.wakes
	s.mu.Unlock()
	for _, w := range wakes {
		w()
	}
}

// Target is the number of kept groups asked for.
func (s *Supply) Target() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.target
}

func (s *Supply) onRaise(wake func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakes = append(s.wakes, wake)
}

// Follow makes the controller continuous: its target is s's, raised as s
// is, and reaching it neither stops admission for good nor makes later
// groups surplus. Call it before the first Next.
func (c *Controller) Follow(s *Supply) {
	c.mu.Lock()
	c.supply = s
	c.reached = false
	c.mu.Unlock()
	s.onRaise(c.signal)
}
