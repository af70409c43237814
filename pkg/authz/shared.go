package authz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/redisledger"
)

// UnavailablePolicy is what a replica does with a Check while the shared
// ledger does not answer; it is the configuration's ledger.on_unavailable.
// The zero value is FailClosed.
type UnavailablePolicy uint8

// The policies.
const (
	// FailClosed rejects the Check, reason ledger_unavailable.
	FailClosed UnavailablePolicy = iota
	// FailOpen admits it without a permit.
	FailOpen
	// LocalShare admits it within this replica's share of the limit (the
	// limit divided by the replicas the others hold its share back by,
	// rounded down: redisledger.Ledger.Share), once the replica has been
	// cut off long enough for the replicas that still reach Redis to hold
	// its share back (before that, and past ledger.local_share_for, it
	// rejects as FailClosed), so that the replicas' sum stays within the
	// limit.
	LocalShare
)

var unavailableNames = [...]string{"fail_closed", "fail_open", "local_share"}

func (p UnavailablePolicy) String() string {
	if int(p) < len(unavailableNames) {
		return unavailableNames[p]
	}
	return fmt.Sprintf("unavailable_policy(%d)", uint8(p))
}

// ErrUnknownUnavailablePolicy is wrapped by ParseUnavailablePolicy's error.
var ErrUnknownUnavailablePolicy = errors.New("unknown on_unavailable policy")

// ParseUnavailablePolicy maps a policy's name to it.
func ParseUnavailablePolicy(s string) (UnavailablePolicy, error) {
	for i, n := range unavailableNames {
		if s == n {
			return UnavailablePolicy(i), nil
		}
	}
	return FailClosed, fmt.Errorf("%w: %q (want fail_closed, fail_open or local_share)", ErrUnknownUnavailablePolicy, s)
}

// Shared is a ledger that many replicas share (*redisledger.Ledger): it
// decides admissions itself, globally.
type Shared interface {
	Acquire(ctx context.Context, r redisledger.Request) (string, error)
	Release(bulkhead, token string, src permit.Source) (permit.Lease, permit.Result)
	// LocalShareOK reports whether this replica may admit its share alone
	// now (LocalShare): it has been cut off from Redis long enough for the
	// others to hold its share back.
	LocalShareOK() bool
	// AdmitAlone runs register (the registration of a permit admitted from
	// the local share) if LocalShareOK, atomically with respect to the
	// hand-over to the shared ledger, and reports whether it ran it.
	AdmitAlone(register func()) bool
}

// SharedRecorder counts what only the shared path does.
type SharedRecorder interface {
	// FailOpen counts a Check admitted without a permit because the shared
	// ledger did not answer.
	FailOpen(dependency string)
}

// shared is the shared-ledger configuration of a Server.
type shared struct {
	ledger Shared
	policy UnavailablePolicy
	// alone admits from the bulkheads at this replica's share of each
	// limit, for LocalShare; the Server's own ledger registers their
	// permits, while ledger lets it (aloneLedger).
	alone local
	rec   SharedRecorder
}

// errNotAlone: a permit admitted from the local share was not registered,
// because the hand-over to the shared ledger began meanwhile.
var errNotAlone = errors.New("the local share ended before the permit was registered")

// aloneLedger is the server's own ledger for the permits admitted from the
// local share: it registers one only while the shared ledger lets this
// replica admit alone (Shared.AdmitAlone), so that the hand-over finds
// every one of them.
type aloneLedger struct {
	Ledger
	shared Shared
}

func (a aloneLedger) Grant(p permit.Releaser, g permit.Grant) (token string, err error) {
	if !a.shared.AdmitAlone(func() { token, err = a.Ledger.Grant(p, g) }) {
		return "", errNotAlone
	}
	return token, err
}

// WithShared makes the server take permits from a shared ledger, applying
// policy while it does not answer. With LocalShare, shares holds the
// bulkheads sized to this replica's share, and the server's own Ledger
// registers their permits (handed to the shared ledger when it is back).
func WithShared(l Shared, policy UnavailablePolicy, shares Bulkheads, rec SharedRecorder) Option {
	return func(s *Server) {
		// New sets s.ledger before it applies the options.
		s.shared = &shared{ledger: l, policy: policy, rec: rec,
			alone: local{bulkheads: shares, ledger: aloneLedger{Ledger: s.ledger, shared: l}}}
	}
}

// checkShared is check's part after the bulkhead and priority are known,
// when permits come from the shared ledger.
func (s *Server) checkShared(ctx context.Context, pol *Policy, l *bulkhead.Limiter, key string, r *request,
	prio bulkhead.Priority, deadline time.Time, node string, start time.Time) (answer, error) {
	sh := s.shared
	req := redisledger.Request{Bulkhead: key, Priority: prio, Settings: l.Settings(), Node: node, Deadline: deadline,
		TTL: s.leaseTTL(pol, key, r.leaseTTL, node)}
	if ts, id := s.tenantOf(pol, s.bulkheads, key, r.tenant); ts != nil {
		tmpl := ts.Template()
		req.Tenant, req.TenantSettings, req.MaxTenants = id, &tmpl, ts.Max()
	}
	token, err := sh.ledger.Acquire(ctx, req)
	if err == nil {
		if err := ctx.Err(); err != nil {
			// Granted, but Envoy no longer waits for the answer.
			sh.ledger.Release(key, token, permit.Cancel)
			l.CountShared(prio, bulkhead.ReasonNone, true)
			return answer{}, status.FromContextError(err).Err()
		}
		l.CountShared(prio, bulkhead.ReasonNone, false)
		s.rec.Waited(key, s.clock.Now().Sub(start))
		return answer{token: token, key: key}, nil
	}
	if reason := bulkhead.ReasonOf(err); reason != bulkhead.ReasonNone {
		l.CountShared(prio, reason, false)
		return respond(denied(pol, key, reason)), nil
	}
	if !errors.Is(err, redisledger.ErrUnavailable) {
		if ctx.Err() != nil {
			l.CountShared(prio, bulkhead.ReasonNone, true)
			return answer{}, status.FromContextError(ctx.Err()).Err()
		}
		s.log.Error("shared ledger", "bulkhead", key, "err", err)
		return answer{}, status.Errorf(codes.Internal, "bulkhead: %v", err)
	}
	switch sh.policy {
	case FailOpen:
		sh.rec.FailOpen(key)
		return respond(allowed()), nil
	case LocalShare:
		if ll := sh.alone.bulkheads.Get(key); ll != nil && sh.ledger.LocalShareOK() {
			a, err := s.admitLocal(ctx, pol, sh.alone, ll, key, r, prio, deadline, node, start)
			if !errors.Is(err, errNotAlone) {
				return a, err
			}
		}
	}
	l.CountShared(prio, bulkhead.ReasonLedgerUnavailable, false)
	return respond(denied(pol, key, bulkhead.ReasonLedgerUnavailable)), nil
}
