package control

import (
	"errors"
	"fmt"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// ErrNoBreaker means that the bulkhead configures no circuit breaker.
var ErrNoBreaker = errors.New("bulkhead has no circuit breaker")

// WithBreakers makes the controller apply each configuration's circuit
// breakers to set, and show and override them (default: none).
func WithBreakers(set *breaker.Set) Option { return func(ctl *Control) { ctl.breakers = set } }

// applyBreakers gives set a breaker for each bulkhead of cfg that
// configures one.
func applyBreakers(set *breaker.Set, cfg *config.Config) {
	want := map[string]breaker.Settings{}
	for name, b := range cfg.Bulkheads {
		if b.Breaker != nil {
			want[name] = *b.Breaker
		}
	}
	set.Apply(want)
}

// SetCircuit sets the operator mode of a bulkhead's breaker: force_open,
// force_closed, or auto (back to its outcomes). A mode lasts until the next
// call or until the bulkhead loses its breaker.
func (c *Control) SetCircuit(name string, m breaker.Mode, actor string) (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reg.Get(name) == nil {
		return Status{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	var b *breaker.Breaker
	if c.breakers != nil {
		b = c.breakers.Get(name)
	}
	if b == nil {
		return Status{}, fmt.Errorf("%w: %q", ErrNoBreaker, name)
	}
	before := b.Snapshot().Mode
	b.SetMode(m)
	c.log.Info("circuit breaker mode set", "bulkhead", name, "actor", actor, "before", before.String(), "after", m.String())
	return c.getLocked(name)
}
