package generate

// pause reports whether the fleet is paused, in which mode, and which
// pause it is: a channel that identifies it (closed by its Resume). A nil
// policy is never paused.
func (p *Policy) pause() (paused bool, mode PauseMode, id <-chan struct{}) {
	if p == nil {
		return false, "", nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.mode, p.resumed
}
