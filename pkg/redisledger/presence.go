package redisledger

import (
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// A bulkhead's presence hash R (common.lua) says which replicas looked at
// it, and when: those that stopped may be admitting their local share
// alone, and the others hold that share back (absent_shares). A replica
// cut off divides each limit by the replicas R held at its last look
// (Share), the count absent_shares divides by, which keeps an absent
// replica until it is forgotten (the live count forgets it after
// replicaStale ticks).

// present records R as a look at bulkhead name returned it (kept: replica,
// seen, ...).
func (l *Ledger) present(name string, kept []any) {
	seen := make(map[string]int64, len(kept)/2)
	for i := 0; i+1 < len(kept); i += 2 {
		r, _ := kept[i].(string)
		t, _ := kept[i+1].(int64)
		seen[r] = t
	}
	l.presMu.Lock()
	l.presence[name] = seen
	l.presMu.Unlock()
}

// Share is this replica's share of s, bulkhead name's settings, for
// admitting alone (local_share): its limit and queue divided by the
// replicas that looked at the bulkhead and are not forgotten, as this
// replica last saw them (at least the live count), rounded down. The
// others hold back floor(limit / replicas in R) for it (absent_shares in
// common.lua): the same count, so what this replica admits alone never
// exceeds what they hold back.
func (l *Ledger) Share(name string, s bulkhead.Settings) bulkhead.Settings {
	l.presMu.Lock()
	n := len(l.presence[name])
	l.presMu.Unlock()
	n = max(n, l.Replicas(), 1)
	s.MaxConcurrent /= n
	s.MaxQueue /= n
	return s
}
