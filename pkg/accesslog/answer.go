package accesslog

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// The ledger answers each release and renewal through a callback
// (admission.Done), possibly from another goroutine: this file is what the
// server makes of those answers.

// pendingEnd is an end entry waiting for the ledger's answer
// (admission.Done): copies of what its stream and entry said, since the
// ledger may answer after their buffers are reused. Pooled: an entry
// costs no allocation for its answer.
type pendingEnd struct {
	s  *Server
	st stream
	e  entry
}

var pendingEnds = sync.Pool{New: func() any { return new(pendingEnd) }}

// Done implements admission.Done.
func (p *pendingEnd) Done(lease permit.Lease, res permit.Result) {
	p.s.released(&p.st, &p.e, lease, res)
	*p = pendingEnd{}
	pendingEnds.Put(p)
}

// streamRenewals answers the renewals of one stream's periodic entries
// (admission.Done): they need nothing of the entry.
type streamRenewals struct {
	s    *Server
	move *atomic.Bool
}

// Done implements admission.Done.
func (r *streamRenewals) Done(lease permit.Lease, res permit.Result) { r.s.renewed(r.move, lease, res) }

// released records what the release of an end entry did.
func (s *Server) released(st *stream, e *entry, lease permit.Lease, res permit.Result) {
	switch res {
	case permit.Released:
	case permit.Expired:
		s.rec.LogEntry(permit.EntryDuplicate)
		if s.heartbeat.On() {
			s.rec.HeartbeatProblem(permit.EndedAfterExpiry)
			// Its request ran until now: a node that heartbeats sent
			// periodic entries within the last TTL, this one's or others'.
			if since := s.clock.Now().Add(-s.heartbeat.TTL); !s.heartbeats(st, since) && s.heardAll(since) {
				s.silent.Mark(st.node, permit.EndedAfterExpiry, lease, 0)
			}
		}
		return
	case permit.Duplicate:
		s.rec.LogEntry(permit.EntryDuplicate)
		return
	case permit.Forwarded:
		s.rec.LogEntry(permit.EntryForwarded)
		return
	case permit.Unavailable:
		s.unavailable(st)
		return
	default:
		s.rec.LogEntry(permit.EntryUnknown)
		return
	}
	s.rec.LogEntry(permit.EntryReleased)
	s.rec.Outcome(lease.Bulkhead, outcome(e))
	held := s.clock.Now().Sub(lease.Acquired)
	if s.calls != nil {
		s.calls.Ended(lease.Bulkhead, outcome(e), held)
	}
	if up, ok := e.upstream(); ok {
		s.rec.ReleaseLag(lease.Bulkhead, max(0, held-up))
	}
	if s.heartbeat.On() && lease.Renewed.IsZero() && held >= s.heartbeat.SilentAfter() && !s.heartbeats(st, lease.Acquired) &&
		s.heardAll(lease.Acquired) {
		s.rec.HeartbeatProblem(permit.NoPeriodic)
		s.silent.Mark(st.node, permit.NoPeriodic, lease, held)
	}
}

// unavailable records an entry the ledger could not serve: it cannot reach
// its store. The stream moves to another replica (stream.move).
func (s *Server) unavailable(st *stream) {
	s.rec.LogEntry(permit.EntryLedgerUnavailable)
	st.move.Store(true)
}

// heartbeats reports whether the node of st, which carried an end entry,
// is known to send periodic entries: one came on st, or one came from its
// node on any stream (its heartbeat logger's) at or after t.
func (s *Server) heartbeats(st *stream, t time.Time) bool {
	return st.sawPeriodic || s.nodes != nil && s.nodes.since(st.node, t)
}

// heardAll reports whether this replica heard every periodic entry of its
// permits since t (WithHearing): only then is one never renewed evidence.
func (s *Server) heardAll(t time.Time) bool {
	return s.hearsAll == nil || !t.Before(s.hearsAll())
}

// renewed records what the renewal of a periodic entry did.
func (s *Server) renewed(move *atomic.Bool, lease permit.Lease, res permit.Result) {
	switch res {
	case permit.Renewed:
		s.rec.LogEntry(permit.EntryRenewed)
	case permit.Adopted, permit.AdoptedExpired:
		if res == permit.AdoptedExpired {
			s.rec.HeartbeatProblem(permit.RenewedAfterExpiry)
		}
		s.rec.LogEntry(permit.EntryAdopted)
		s.rec.Adopted(lease.Bulkhead)
	case permit.Late:
		s.rec.LogEntry(permit.EntryLate)
	case permit.Forwarded:
		s.rec.LogEntry(permit.EntryForwarded)
	case permit.Unavailable:
		s.rec.LogEntry(permit.EntryLedgerUnavailable)
		move.Store(true)
	default:
		s.rec.LogEntry(permit.EntryUnknown)
	}
}

// outcome classifies an ended request: a 5xx, or an upstream/local reset or
// timeout, is a failure; otherwise a client that went away before the
// response was complete (before or during the body) is an abort; a request
// with no response at all is a failure; anything else is a success. A
// connection has no response: it failed on upstream trouble, else it
// succeeded (the client closing it is its normal end).
func outcome(e *entry) bulkhead.Outcome {
	f := e.flags
	upstreamTrouble := f.has(flagUpstreamRequestTimeout) || f.has(flagLocalReset) || f.has(flagUpstreamRemoteReset) ||
		f.has(flagUpstreamConnectionFailure) || f.has(flagUpstreamConnectionTermination) || f.has(flagUpstreamOverflow) ||
		f.has(flagNoHealthyUpstream) || f.has(flagStreamIdleTimeout) || f.has(flagUpstreamMaxStreamDurationReached) ||
		f.has(flagDurationTimeout) || f.has(flagUpstreamProtocolError) || f.has(flagUpstreamRetryLimitExceeded)
	switch {
	case e.conn && upstreamTrouble:
		return bulkhead.Failure
	case e.conn:
		return bulkhead.Success
	case e.code >= 500, upstreamTrouble:
		return bulkhead.Failure
	case f.has(flagDownstreamConnectionTermination) || f.has(flagDownstreamRemoteReset):
		return bulkhead.Aborted
	case e.code == 0:
		return bulkhead.Failure
	default:
		return bulkhead.Success
	}
}
