package control

import "fmt"

// OverrideSink is told of every override made (o set) or dropped (o nil)
// through Update and Reset, so that a shared ledger can carry it to the
// other replicas. It is called with the Control's lock held: it must not
// block (hand the event to a goroutine of its own).
type OverrideSink func(name string, o *Override)

// WithOverrideSink makes Update and Reset tell sink of each change.
func WithOverrideSink(sink OverrideSink) Option { return func(ctl *Control) { ctl.sink = sink } }

// ApplyRemote applies an override made at another replica (o set), or its
// reset (o nil): the bulkhead is resized to it as Update or Reset would,
// without telling the sink. A bulkhead this replica does not have is
// ErrNotFound.
func (c *Control) ApplyRemote(name string, o *Override) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.reg.Get(name)
	if l == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	before := l.Settings()
	if o == nil {
		if _, ok := c.overrides[name]; !ok || c.cfg == nil {
			return nil
		}
		if err := l.Resize(c.cfg.Bulkheads[name].Settings); err != nil {
			return err
		}
		delete(c.overrides, name)
		c.log.Info("bulkhead reset to the file by another replica", "bulkhead", name,
			"before", fmtSettings(before), "after", fmtSettings(l.Settings()))
		return nil
	}
	if err := l.Resize(o.Settings); err != nil {
		return err
	}
	c.overrides[name] = *o
	c.log.Info("bulkhead changed at another replica", "bulkhead", name, "actor", o.Actor,
		"before", fmtSettings(before), "after", fmtSettings(o.Settings))
	return nil
}

// tell passes a change to the sink, if any.
func (c *Control) tell(name string) {
	if c.sink == nil {
		return
	}
	if ov, ok := c.overrides[name]; ok {
		c.sink(name, &ov)
		return
	}
	c.sink(name, nil)
}
