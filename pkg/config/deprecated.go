package config

import (
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
)

// The keys and values that changed meaning, and what each is read as.
const (
	keyOnUnavailable  = "ledger.on_unavailable"
	keyCapacityLeases = "ledger.redis.capacity_leases"
	keyLocalShareFor  = "ledger.local_share_for"
	// localShare is the former third ledger.on_unavailable policy: since
	// capacity leases it is read as capacity_leases true with fail_closed.
	localShare = "local_share"
)

// onUnavailable is ledger.on_unavailable: fail_closed or fail_open, or
// local_share, which the decoder remembers (resolveLocalShare) and reads
// as fail_closed.
var onUnavailable = field{
	set: func(d *decoder, c *Config, key string, raw any) {
		s, ok := d.strOK(key, raw)
		if ok && s == localShare {
			d.localShare = true
			c.Ledger.OnUnavailable = admission.FailClosed
			return
		}
		p, err := admission.ParseUnavailablePolicy(s)
		if ok {
			d.check(key, raw, err == nil, "must be fail_closed or fail_open "+
				"(local_share, deprecated, is read as ledger.redis.capacity_leases: true with fail_closed)")
		}
		c.Ledger.OnUnavailable = p
	},
	differs: func(a, b *Config) bool { return a.Ledger.OnUnavailable != b.Ledger.OnUnavailable },
}

// localShareFor is ledger.local_share_for, which no longer has an effect:
// a replica cut off from Redis admits within its capacity lease until the
// lease's end. It is accepted, with a warning, so that a configuration
// written for the local share still starts.
var localShareFor = field{
	set: func(d *decoder, _ *Config, key string, raw any) {
		if s, ok := raw.(string); raw == nil || ok && s == "" {
			return
		}
		d.warn(key, "has no effect since local_share became capacity leases (a replica cut off from Redis "+
			"admits within the lease it holds, until the lease's end, which bounds it now); delete this setting", raw)
	},
	differs: func(_, _ *Config) bool { return false },
}

// resolveLocalShare reads on_unavailable local_share as capacity leases
// with fail_closed (the policy beyond the lease), with a warning that says
// what to write instead, or refuses it beside an explicit capacity_leases
// false (a contradiction).
func (d *decoder) resolveLocalShare(c *Config) {
	if !d.localShare || d.ps.bad[keyOnUnavailable] {
		return
	}
	l := &c.Ledger
	if l.Backend != LedgerRedis {
		d.warn(keyOnUnavailable, "is deprecated (and without effect unless ledger.backend is redis): "+
			"write fail_closed, or fail_open", localShare)
		return
	}
	if d.explicit[keyCapacityLeases] && !l.Redis.CapacityLeases {
		d.ps.add(keyOnUnavailable, "must not be local_share with ledger.redis.capacity_leases false: local_share "+
			"is now capacity leases (a replica cut off from Redis admits within the lease it holds, until the "+
			"lease's end); write capacity_leases: true with on_unavailable fail_closed (or fail_open), or "+
			"keep capacity_leases: false with fail_closed or fail_open", d.got(keyOnUnavailable, localShare))
		return
	}
	l.Redis.CapacityLeases = true
	d.warn(keyOnUnavailable, "is deprecated and read as ledger.redis.capacity_leases: true with "+
		"ledger.on_unavailable: fail_closed (a replica cut off from Redis admits within the capacity lease it "+
		"holds, until the lease's end, and rejects beyond it); write on_unavailable: fail_closed "+
		"(or fail_open) instead", localShare)
}

// warn records a warning at key, showing value v and its origin as a
// problem does.
func (d *decoder) warn(key, reason string, v any) {
	d.ws = append(d.ws, Problem{Field: key, Reason: reason, Got: d.got(key, v)})
}

// setIn reports whether key, dotted, is set in settings, the file's
// settings as splitRoot kept them.
func setIn(settings map[string]any, key string) bool {
	parts := strings.Split(key, ".")
	m := settings
	for i, p := range parts {
		v, ok := m[p]
		if !ok || v == nil {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}
