package redisledger

import (
	"context"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// A bulkhead's presence hash R (common.lua) says which replicas looked at
// it, and when: those that stopped may be admitting their local share
// alone, and the others hold that share back (absent_shares). Two things
// keep both sides to one count:
//
//   - a replica cut off divides each limit by the replicas R held at its
//     last look (Share), the count absent_shares divides by, which keeps an
//     absent replica until it is forgotten (the live count forgets it after
//     replicaStale ticks);
//   - R is lost with Redis's data, and a replica cut off across the loss
//     cannot write itself back: every replica that looks remembers R, and
//     one whose look finds itself missing from R writes back what it
//     remembers, each replica with the time it was last seen (HSETNX: an
//     entry written since wins). So an absent replica is held back for as
//     long as it would have been without the loss.

// restore is what a look found lost of a bulkhead's R: the entries to
// write back.
type restore struct {
	name string
	seen map[string]int64
}

// present records R as a look at bulkhead name returned it (kept: replica,
// seen, ...; had: R held this replica before the look; now: Redis's clock)
// and returns the entries to write back when R was lost: R lacked this
// replica, which wrote itself at its last look. An entry older than forget
// is not written back (state.lua would forget it).
func (l *Ledger) present(name string, kept []any, had bool, now int64) restore {
	seen := make(map[string]int64, len(kept)/2)
	for i := 0; i+1 < len(kept); i += 2 {
		r, _ := kept[i].(string)
		t, _ := kept[i+1].(int64)
		seen[r] = t
	}
	out := restore{name: name}
	forget := ms(l.forget())
	l.presMu.Lock()
	defer l.presMu.Unlock()
	if prev, ok := l.presence[name]; ok && !had {
		for r, t := range prev {
			if _, found := seen[r]; !found && r != l.cfg.Replica && now-t <= forget {
				if out.seen == nil {
					out.seen = map[string]int64{}
				}
				out.seen[r], seen[r] = t, t
			}
		}
	}
	l.presence[name] = seen
	return out
}

// restore writes back the lost entries of R (present), pipelined.
func (l *Ledger) restore(ctx context.Context, lost []restore) {
	if len(lost) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout*4)
	defer cancel()
	pipe := l.rdb.Pipeline()
	n := 0
	for _, r := range lost {
		key := l.keysOf(r.name)[keyReplicas]
		for replica, t := range r.seen {
			pipe.HSetNX(cctx, key, replica, t)
			n++
		}
	}
	if _, err := pipe.Exec(cctx); err != nil {
		l.log.Warn("replicas' presence not written back after redis lost it: their local shares are not held back",
			"entries", n, "err", err)
		return
	}
	l.log.Warn("redis lost the replicas' presence: written back, so that the shares of replicas cut off stay held back",
		"entries", n)
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
