package bulkhead

// TakePeak returns the most permits in use at once since the previous
// call (or since New), and starts the next span at the current in-use.
func (l *Limiter) TakePeak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := max(l.peak, l.inUse)
	l.peak = l.inUse
	return p
}
