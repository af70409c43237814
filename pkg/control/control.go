package control

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// PolicySetter receives the Check policy of each configuration;
// *authz.Server is one.
type PolicySetter interface {
	SetPolicy(authz.Policy)
}

// Control reconciles the configuration file and admin changes onto the
// bulkhead registry.
type Control struct {
	reg      *bulkhead.Registry
	policy   PolicySetter
	log      *slog.Logger
	clock    clock.Clock
	outcomes OutcomeSource
	global   GlobalSource     // nil: this process's own counts
	sink     OverrideSink     // nil: overrides stay here
	breakers *breaker.Set     // nil: none
	sizing   *sizing.Observer // nil: no suggestions

	mu        sync.Mutex
	cfg       *config.Config // last applied file configuration
	overrides map[string]Override
}

// Option configures a Control.
type Option func(*Control)

// OutcomeSource counts how a bulkhead's admitted requests ended;
// *sizing.Observer, which hears of every end, is one.
type OutcomeSource interface {
	Outcomes(dependency string) (success, failure, aborted uint64)
}

// WithOutcomes makes statuses carry outcome counts from src.
func WithOutcomes(src OutcomeSource) Option { return func(ctl *Control) { ctl.outcomes = src } }

// GlobalSource gives a bulkhead's permits in use and waiters summed over
// every replica, when a ledger that several replicas share keeps them;
// *redisledger.Ledger is one.
type GlobalSource interface {
	Global(bulkhead string) (admission.Global, bool)
}

// WithGlobal makes statuses show every replica's permits and waiters from
// src instead of this process's own.
func WithGlobal(src GlobalSource) Option { return func(ctl *Control) { ctl.global = src } }

// WithClock sets the clock that stamps overrides (default: real).
func WithClock(c clock.Clock) Option { return func(ctl *Control) { ctl.clock = c } }

// New returns a Control over reg that passes each configuration's Check
// policy to policy. It applies nothing until the first Reload.
func New(reg *bulkhead.Registry, policy PolicySetter, log *slog.Logger, opts ...Option) *Control {
	c := &Control{reg: reg, policy: policy, log: log, clock: clock.Real{}, overrides: map[string]Override{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Reload applies a validated configuration: new bulkheads appear, removed
// ones stop admitting (their permits are still released), changed ones are
// resized in place. Overrides of bulkheads whose file entry changed (or
// that were removed) are dropped: the file wins. It returns what changed.
func (c *Control) Reload(cfg *config.Config) (bulkhead.Changes, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, ov := range c.overrides {
		nb, ok := cfg.Bulkheads[name]
		if ok && c.cfg != nil && nb.Settings == c.cfg.Bulkheads[name].Settings {
			continue
		}
		delete(c.overrides, name)
		c.log.Info("admin override dropped: the file changed this bulkhead",
			"bulkhead", name, "override_by", ov.Actor, "override", fmtSettings(ov.Settings))
	}
	want := make(map[string]bulkhead.Settings, len(cfg.Bulkheads))
	for name, b := range cfg.Bulkheads {
		want[name] = b.Settings
		if ov, ok := c.overrides[name]; ok {
			want[name] = ov.Settings
		}
	}
	ch, err := c.reg.Apply(want)
	if err != nil {
		return ch, err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfg.Bulkheads)) {
		if err := c.applyTenants(cfg, name); err != nil {
			errs = append(errs, fmt.Errorf("bulkheads.%s.tenant: %w", name, err))
		}
	}
	if c.breakers != nil {
		applyBreakers(c.breakers, cfg)
	}
	c.policy.SetPolicy(Policy(cfg))
	c.cfg = cfg
	c.log.Info("configuration applied", "source", cfg.Source, "bulkheads", len(cfg.Bulkheads),
		"added", ch.Added, "resized", ch.Resized, "removed", ch.Removed, "overrides_kept", len(c.overrides))
	return ch, errors.Join(errs...)
}

// List returns every bulkhead's status, sorted by name.
func (c *Control) List() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	snaps := c.reg.Snapshots()
	out := make([]Status, 0, len(snaps))
	for _, s := range snaps {
		out = append(out, c.statusLocked(s))
	}
	return out
}

// Get returns one bulkhead's status, or ErrNotFound.
func (c *Control) Get(name string) (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(name)
}

func (c *Control) getLocked(name string) (Status, error) {
	l := c.reg.Get(name)
	if l == nil {
		return Status{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	s := l.Snapshot()
	if t := c.reg.Tenants(name); t != nil {
		st := t.Stats()
		s.Tenants = &st
	}
	return c.statusLocked(s), nil
}

func (c *Control) statusLocked(s bulkhead.Snapshot) Status {
	if c.global != nil {
		if g, ok := c.global.Global(s.Name); ok {
			s.InUse = g.InUse
			copy(s.Queued[:], g.Queued[:])
		}
	}
	st := Status{Snapshot: s, Kind: config.KindRequests}
	if c.cfg != nil {
		b := c.cfg.Bulkheads[s.Name]
		st.FileSettings, st.LeaseTTL, st.Kind = b.Settings, b.LeaseTTL, b.Kind()
	}
	if ov, ok := c.overrides[s.Name]; ok {
		st.Override = &ov
	}
	if s.Tenants != nil {
		st.Tenants = s.Tenants.Live
	}
	if c.breakers != nil {
		if b := c.breakers.Get(s.Name); b != nil {
			cs := b.Snapshot()
			st.Circuit = &cs
		}
	}
	if c.outcomes != nil {
		var o Outcomes
		o.Success, o.Failure, o.Aborted = c.outcomes.Outcomes(s.Name)
		st.Outcomes = &o
	}
	return st
}

// Update changes a bulkhead's settings at run time, overriding the file
// (see the package doc for how long). The result is validated as a whole;
// an invalid patch changes nothing and its error names each field.
func (c *Control) Update(name string, p Patch, actor string) (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.reg.Get(name)
	if l == nil {
		return Status{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	before := l.Settings()
	after := p.Apply(before)
	if err := l.Resize(after); err != nil {
		c.log.Warn("bulkhead change refused", "bulkhead", name, "actor", actor, "err", err)
		return Status{}, err
	}
	if c.cfg != nil && after == c.cfg.Bulkheads[name].Settings {
		delete(c.overrides, name) // back to what the file says
	} else {
		c.overrides[name] = Override{Settings: after, Actor: actor, At: c.clock.Now()}
	}
	c.log.Info("bulkhead changed", "bulkhead", name, "actor", actor,
		"before", fmtSettings(before), "after", fmtSettings(after))
	c.tell(name)
	return c.getLocked(name)
}

// Reset drops a bulkhead's override: the file's settings apply again.
func (c *Control) Reset(name, actor string) (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.reg.Get(name)
	if l == nil {
		return Status{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if _, ok := c.overrides[name]; ok && c.cfg != nil {
		before, after := l.Settings(), c.cfg.Bulkheads[name].Settings
		if err := l.Resize(after); err != nil {
			return Status{}, err
		}
		delete(c.overrides, name)
		c.log.Info("bulkhead reset to the file", "bulkhead", name, "actor", actor,
			"before", fmtSettings(before), "after", fmtSettings(after))
		c.tell(name)
	}
	return c.getLocked(name)
}

func fmtSettings(s bulkhead.Settings) string {
	return fmt.Sprintf("max_concurrent=%d max_queue=%d max_wait=%s reserve.critical=%g reserve.normal=%g",
		s.MaxConcurrent, s.MaxQueue, s.MaxWait, s.ReserveCritical, s.ReserveNormal)
}

// Policy is the Check policy of a configuration: its authz section, and
// the leases and connections its other sections give.
func Policy(cfg *config.Config) authz.Policy {
	p := authz.Policy{
		Settings:         cfg.Authz,
		LeaseTTL:         make(map[string]time.Duration, len(cfg.Bulkheads)),
		HeartbeatTTL:     cfg.Leases.Heartbeat().Lease(),
		DefaultLeaseTTL:  cfg.Leases.DefaultTTL,
		MaxRouteLeaseTTL: cfg.Leases.MaxRouteTTL,
	}
	for k, b := range cfg.Bulkheads {
		p.LeaseTTL[k] = b.LeaseTTL
		if b.Connections == nil {
			continue
		}
		if p.Connections == nil {
			p.Connections = map[uint32]authz.Connection{}
		}
		for _, port := range b.Connections.Ports {
			p.Connections[uint32(port)] = authz.Connection{Bulkhead: k, Priority: b.Connections.Priority}
		}
	}
	return p
}
