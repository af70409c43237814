package meshsim

import (
	"sort"
	"sync"
)

// Caps counts, per bulkhead, the requests admitted and still running (from
// the Check's OK to the request's end, before its end entry is sent): the
// daemon holds each one's permit at least that long, so the count must
// never exceed the bulkhead's limit. Safe for concurrent use.
type Caps struct {
	mu      sync.Mutex
	limit   map[string]int
	running map[string]int
	peak    map[string]int
	over    map[string]int // admissions that made running exceed the limit
}

func newCaps(routes []Route) *Caps {
	c := &Caps{limit: map[string]int{}, running: map[string]int{}, peak: map[string]int{}, over: map[string]int{}}
	for _, r := range routes {
		c.limit[r.Bulkhead] = r.Limit
	}
	return c
}

func (c *Caps) enter(b string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[b]++
	n := c.running[b]
	c.peak[b] = max(c.peak[b], n)
	if l := c.limit[b]; l > 0 && n > l {
		c.over[b]++
	}
}

func (c *Caps) leave(b string) {
	c.mu.Lock()
	c.running[b]--
	c.mu.Unlock()
}

// Running is the number of requests running now, every bulkhead.
func (c *Caps) Running() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.running {
		n += int64(v)
	}
	return n
}

// CapReport is what Caps saw of the bulkheads with a limit.
type CapReport struct {
	Checked    int      `json:"bulkheads_checked"`  // bulkheads with a limit
	AtLimit    int      `json:"bulkheads_at_limit"` // of which reached it
	Violations int      `json:"admissions_over_limit"`
	Over       []string `json:"over,omitempty"` // bulkheads that went past their limit
}

// Report says whether every bulkhead with a limit stayed within it.
func (c *Caps) Report() CapReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	var r CapReport
	for b, l := range c.limit {
		if l <= 0 {
			continue
		}
		r.Checked++
		if c.peak[b] >= l {
			r.AtLimit++
		}
		if c.over[b] > 0 {
			r.Violations += c.over[b]
			r.Over = append(r.Over, b)
		}
	}
	sort.Strings(r.Over)
	return r
}
