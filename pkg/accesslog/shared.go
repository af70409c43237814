package accesslog

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// Shared is a ledger that many replicas share (*redisledger.Ledger): its
// leases live under their bulkhead's name, which every entry carries next
// to its token, and it adopts running requests' permits itself (it knows
// when Redis lost them).
//
// Its calls do not wait for Redis: each result comes to a callback (from
// another goroutine), so that one stream's entries, which arrive one after
// another, share round trips to Redis instead of waiting for one each.
type Shared interface {
	// Reachable reports whether this replica reaches the shared ledger
	// now. While it does not, an entry the server cannot serve from its
	// own ledger ends its stream (see stream.move).
	Reachable() bool
	ReleaseAsync(bulkhead, token string, src permit.Source, done func(permit.Lease, permit.Result))
	RenewAsync(bulkhead, token string, ttl time.Duration, node string, force bool, done func(permit.Lease, redisledger.RenewResult))
}

// Known says whether a bulkhead is configured: an entry naming another
// never reaches the shared ledger. *bulkhead.Registry is one (through Get).
type Known func(bulkhead string) bool

// WithShared makes the server release and renew permits in a shared
// ledger. The server's own Ledger still serves the permits admitted
// without it (ledger.on_unavailable: local_share): a token it knows is
// released there.
func WithShared(l Shared, known Known) Option {
	return func(s *Server) { s.shared, s.known = l, known }
}

// releaseShared is release for the shared ledger.
func (s *Server) releaseShared(st *stream, e *entry) {
	if s.holdsLocal() {
		if lease, res := s.ledger.Release(e.token, permit.AccessLog); res == permit.Released {
			s.released(st, e, lease) // admitted by this replica alone
			return
		}
	}
	name := string(e.bulkhead)
	if !s.known(name) {
		s.rec.LogEntry(permit.EntryUnknown)
		return
	}
	if s.unreachable(st) {
		return
	}
	// The callback runs after this entry's buffers are reused: it gets
	// copies (the bulkhead is name, a copy already).
	stc, ec := *st, *e
	ec.bulkhead = nil
	s.shared.ReleaseAsync(name, e.token, permit.AccessLog, func(lease permit.Lease, res permit.Result) {
		s.sharedReleased(&stc, &ec, lease, res)
	})
}

// holdsLocal reports whether the server's own ledger may hold permits
// admitted without the shared one; asking it then costs nothing, and a
// token it does not know is not counted as an unknown release.
func (s *Server) holdsLocal() bool {
	l, ok := s.ledger.(interface{ Len() int })
	return !ok || l.Len() > 0
}

// sharedReleased records what a release in the shared ledger did.
func (s *Server) sharedReleased(st *stream, e *entry, lease permit.Lease, res permit.Result) {
	switch res {
	case permit.Released:
		s.released(st, e, lease)
	case permit.Duplicate, permit.Expired:
		s.rec.LogEntry(permit.EntryDuplicate)
		if res == permit.Expired && s.heartbeat.On() {
			s.rec.HeartbeatProblem(permit.EndedAfterExpiry)
		}
	case redisledger.Failed:
		s.rec.LogEntry(permit.EntryLedgerUnavailable)
	default:
		s.rec.LogEntry(permit.EntryUnknown)
	}
}

// unreachable reports whether the shared ledger cannot be reached; if so
// the entry is counted and st is to be moved to another replica.
func (s *Server) unreachable(st *stream) bool {
	if s.shared.Reachable() {
		return false
	}
	s.rec.LogEntry(permit.EntryLedgerUnavailable)
	st.move = true
	return true
}

// renewShared is renew for the shared ledger.
func (s *Server) renewShared(st *stream, e *entry, node string) {
	if s.holdsLocal() {
		if _, res := s.ledger.Renew(e.token, s.heartbeat.TTL); res == permit.Renewed {
			s.rec.LogEntry(permit.EntryRenewed) // admitted by this replica alone
			return
		}
	}
	name := string(e.bulkhead)
	if !s.known(name) {
		s.rec.LogEntry(permit.EntryUnknown)
		return
	}
	if s.unreachable(st) {
		return
	}
	s.shared.RenewAsync(name, e.token, s.heartbeat.TTL, node, false, func(_ permit.Lease, res redisledger.RenewResult) {
		s.sharedRenewed(name, res)
	})
}

// sharedRenewed records what a renewal in the shared ledger did.
func (s *Server) sharedRenewed(name string, res redisledger.RenewResult) {
	switch res {
	case redisledger.Renewed:
		s.rec.LogEntry(permit.EntryRenewed)
	case redisledger.AdoptedExpired, redisledger.AdoptedUnknown:
		if res == redisledger.AdoptedExpired {
			s.rec.HeartbeatProblem(permit.RenewedAfterExpiry)
		}
		s.rec.LogEntry(permit.EntryAdopted)
		s.rec.Adopted(name)
	case redisledger.Late:
		s.rec.LogEntry(permit.EntryLate)
	case redisledger.RenewFailed:
		s.rec.LogEntry(permit.EntryLedgerUnavailable)
	default:
		s.rec.LogEntry(permit.EntryUnknown)
	}
}
