package config

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// Shares configures the shares every bulkhead in mode shares or auto hands
// to its Envoys (package shares).
type Shares struct {
	// TTL is the runtime layer's TTL at each Envoy.
	TTL time.Duration
	// MaxRequestDuration bounds a request admitted under a share: the
	// share route's timeout in Envoy.
	MaxRequestDuration time.Duration
	// Interval is how often shares follow demand (and the Envoys report it).
	Interval time.Duration
}

// Settings returns s as package shares takes it.
func (s Shares) Settings() shares.Settings {
	return shares.Settings{TTL: s.TTL, MaxRequest: s.MaxRequestDuration, Interval: s.Interval, Layer: shares.DefaultLayer}
}

// Policies returns the shares policy of every bulkhead.
func (c *Config) Policies() map[string]shares.Policy {
	out := map[string]shares.Policy{}
	for name, b := range c.Bulkheads {
		out[name] = b.Shares
	}
	return out
}

// SharesOn reports whether any bulkhead hands out shares.
func (c *Config) SharesOn() bool {
	for _, b := range c.Bulkheads {
		if b.Shares.Mode != shares.Strict {
			return true
		}
	}
	return false
}

// Bounds of the shares settings.
const (
	minSharesInterval = 100 * time.Millisecond
	maxSharesInterval = 10 * time.Second
	maxSharesTail     = 10 * time.Minute
)

var sharesFields = []string{"mode", "cluster"}

// sharesSection decodes the shares section of the bulkhead name at path.
// A bulkhead in mode shares or auto that names no cluster gets
// shares.DefaultCluster; a strict one has none.
func (d *decoder) sharesSection(path, name string, raw any) (p shares.Policy) {
	path += ".shares"
	fields, ok := d.mapping(path, raw)
	if !ok {
		return p
	}
	defer func() {
		if p.Mode != shares.Strict && p.Cluster == "" {
			p.Cluster = shares.DefaultCluster(name)
		}
	}()
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		key, v := path+"."+k, fields[k]
		if v == nil {
			continue
		}
		switch k {
		case "mode":
			s, ok := d.strOK(key, v)
			if !ok {
				continue
			}
			m, err := shares.ParseMode(s)
			d.check(key, v, err == nil, "must be strict, shares or auto")
			p.Mode = m
		case "cluster":
			p.Cluster = d.str(key, v)
			d.check(key, v, p.Cluster != "" && ValidName(p.Cluster),
				"must name the Envoy cluster of the bulkhead's share route, matching "+NamePattern)
		default:
			d.ps.add(key, unknownField(k, sharesFields), "")
		}
	}
	return p
}

// sharesRules checks what shares need: the in-memory ledger or capacity
// leases on the Redis one (a share is held from a lease), a bulkhead
// that enforces and counts requests with no tenants, a share cluster of
// its own, and settings that let a share end.
func (d *decoder) sharesRules(c *Config) {
	s := c.Shares
	d.rule("shares.interval", s.Interval, s.Interval >= minSharesInterval && s.Interval <= maxSharesInterval,
		fmt.Sprintf("must be in %s..%s", minSharesInterval, maxSharesInterval))
	d.rule("shares.ttl", s.TTL, s.TTL >= 2*s.Interval && s.TTL <= maxSharesTail,
		fmt.Sprintf("must be at least twice shares.interval and at most %s: an Envoy drops its shares when it hears nothing for this long", maxSharesTail))
	d.rule("shares.max_request_duration", s.MaxRequestDuration, s.MaxRequestDuration > 0 && s.MaxRequestDuration <= maxSharesTail,
		fmt.Sprintf("must be positive and at most %s: the timeout of every share route", maxSharesTail))
	owner := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Bulkheads)) {
		b := c.Bulkheads[name]
		if b.Shares.Mode == shares.Strict {
			continue
		}
		path := "bulkheads." + name + ".shares"
		switch {
		case c.Ledger.Backend == LedgerRedis && !c.Ledger.Redis.CapacityLeases:
			d.ps.add(path+".mode", "shares on the Redis ledger are held from capacity leases: set ledger.redis.capacity_leases: true, or use mode strict", b.Shares.Mode.String())
		case b.Settings.DryRun:
			d.ps.add(path+".mode", "a dry run (enforce: false) admits everyone: it hands out no shares; use mode strict", b.Shares.Mode.String())
		case b.Connections != nil:
			d.ps.add(path+".mode", "a connections bulkhead stays strict (no circuit breaker bounds a TCP proxy's connections per cluster)", b.Shares.Mode.String())
		case b.Tenant != nil:
			d.ps.add(path+".mode", "a bulkhead with tenants stays strict (a circuit breaker cannot tell tenants apart)", b.Shares.Mode.String())
		}
		if other, dup := owner[b.Shares.Cluster]; dup {
			d.ps.add(path+".cluster", fmt.Sprintf("cluster %q is already bulkheads.%s's share cluster", b.Shares.Cluster, other), "")
		}
		owner[b.Shares.Cluster] = name
	}
}
