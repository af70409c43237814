package control

import (
	"errors"
	"fmt"

	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// ErrNoSizing means that the controller observes no traffic to size from.
var ErrNoSizing = errors.New("sizing is not available")

// WithSizing makes the controller recommend settings from what obs
// observed (default: none).
func WithSizing(obs *sizing.Observer) Option { return func(ctl *Control) { ctl.sizing = obs } }

// Sized is one bulkhead's recommendation, or why there is none.
type Sized struct {
	Name       string
	Suggestion sizing.Suggestion
	// Refused is set (wrapping sizing.ErrTooLittleTraffic) when there is
	// no recommendation.
	Refused error
}

// Suggest recommends settings for bulkhead name, or for every bulkhead
// when name is "", sorted by name. p's zero fields take the defaults;
// invalid p wraps sizing.ErrInvalidParams.
func (c *Control) Suggest(name string, p sizing.Params) ([]Sized, error) {
	if c.sizing == nil {
		return nil, ErrNoSizing
	}
	p = p.Defaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	names := c.reg.Keys()
	if name != "" {
		if c.reg.Get(name) == nil {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
		}
		names = []string{name}
	}
	out := make([]Sized, 0, len(names))
	for _, n := range names {
		l := c.reg.Get(n)
		if l == nil {
			continue // removed meanwhile
		}
		s, err := c.sizing.Suggest(n, l.Settings(), p)
		out = append(out, Sized{Name: n, Suggestion: s, Refused: err})
	}
	return out, nil
}
