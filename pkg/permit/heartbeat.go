package permit

import "time"

// Heartbeat is the lease contract with Envoy's periodic access log: Envoy
// logs every request in flight each Interval (access_log_flush_interval on
// its HTTP connection manager), each periodic entry renews its permit's
// lease to TTL from now, and a lease neither renewed nor ended within TTL
// is reclaimed. The zero Heartbeat turns renewal off: periodic entries are
// counted and ignored, and leases last their full TTL.
//
// It is the one home of the lease rules every part of the daemon applies:
// whether heartbeats are on, the adoption window, when a permit never
// renewed tells that its Envoy sends no periodic entries.
type Heartbeat struct {
	Interval time.Duration
	TTL      time.Duration
}

// On reports whether periodic entries renew leases.
func (h Heartbeat) On() bool { return h.Interval > 0 && h.TTL > 0 }

// Lease is the first lease of every permit while heartbeats are on, else 0.
func (h Heartbeat) Lease() time.Duration {
	if !h.On() {
		return 0
	}
	return h.TTL
}

// AdoptFor is how long after a ledger starts (or loses its state) it
// adopts the unknown tokens of periodic entries: one interval past one
// TTL. A permit of an earlier process whose request still runs is heard of
// before then, or it has expired; later, every live permit is known or
// remembered, and an unknown token in a periodic entry is a forgery (or
// forgotten): it is not adopted. 0 with heartbeats off.
func (h Heartbeat) AdoptFor() time.Duration {
	if !h.On() {
		return 0
	}
	return h.TTL + h.Interval
}

// SilentAfter is how long a permit must have been held for its request to
// have had a periodic entry, with room for Envoy's timer and the delivery:
// an end entry of a permit held this long and never renewed tells that its
// Envoy does not send periodic entries.
func (h Heartbeat) SilentAfter() time.Duration { return 2*h.Interval + h.Interval/2 }
