package authz

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Bulkheads finds a bulkhead, and its tenant sub-bulkheads, by key;
// *bulkhead.Registry is one.
type Bulkheads interface {
	Get(key string) *bulkhead.Limiter
	// Tenants returns nil when the bulkhead has no tenant template.
	Tenants(key string) *bulkhead.Tenants
}

// Ledger registers granted permits; *permit.Memory is one.
type Ledger interface {
	Grant(p permit.Releaser, g permit.Grant) (string, error)
	Release(token string, src permit.Source) (permit.Lease, permit.Result)
}

// UnmatchedOutcome says what became of a Check that named no configured
// bulkhead (Recorder.Unmatched). The type and its values live in package
// bulkhead, below this package and the metrics that count them.
type UnmatchedOutcome = bulkhead.UnmatchedOutcome

// The outcomes Recorder.Unmatched counts.
const (
	UnmatchedAllowed   = bulkhead.UnmatchedAllowed   // answered OK without a permit
	UnmatchedDenied    = bulkhead.UnmatchedDenied    // rejected, reason unknown_bulkhead
	UnmatchedDefaulted = bulkhead.UnmatchedDefaulted // served by Policy.DefaultBulkhead
)

// Recorder receives what the server measures; *metrics.Metrics is one.
type Recorder interface {
	Waited(dependency string, d time.Duration)
	InvalidPriority(dependency string)
	Unmatched(outcome UnmatchedOutcome)
	// InvalidLeaseTTL counts a route lease_ttl that was not a positive
	// duration (ignored) or was above the cap (cut to it).
	InvalidLeaseTTL(dependency string)
}

// Server answers Envoy's Check calls.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	bulkheads Bulkheads
	ledger    Ledger
	rec       Recorder
	breakers  Breakers // nil: none
	clock     clock.Clock
	log       *slog.Logger
	silent    SilentNodes   // never nil
	inputs    InputRecorder // never nil
	shared    *shared       // nil: permits are this process's
	policy    atomic.Pointer[Policy]
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithClock sets the clock used to measure waits (default: real).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// New returns a server answering with policy pol.
func New(b Bulkheads, l Ledger, rec Recorder, pol Policy, opts ...Option) *Server {
	s := &Server{bulkheads: b, ledger: l, rec: rec, clock: clock.Real{}, log: slog.New(slog.DiscardHandler), inputs: nopInputs{},
		silent: noSilentNodes{}}
	for _, o := range opts {
		o(s)
	}
	s.SetPolicy(pol)
	return s
}

// SetPolicy swaps the policy; Checks in flight keep the one they started with.
func (s *Server) SetPolicy(p Policy) {
	p = p.normalised()
	s.policy.Store(&p)
}

// Check implements authv3.AuthorizationServer. A server registered with
// Register answers Envoy without decoding the whole CheckRequest (see
// checkHandler), through the same check.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	pol := s.policy.Load()
	a, err := s.check(ctx, pol, requestOf(pol, req))
	if err != nil {
		return nil, err
	}
	return a.message(), nil
}

// answer is what a Check answers: a granted permit's token and bulkhead,
// or, when no permit was granted, resp.
type answer struct {
	token, key string
	resp       *authv3.CheckResponse
}

func respond(resp *authv3.CheckResponse) answer { return answer{resp: resp} }

// message is the answer as a CheckResponse.
func (a answer) message() *authv3.CheckResponse {
	if a.resp != nil {
		return a.resp
	}
	return admitted(a.token, a.key)
}

// encoded is the answer as the wire codec sends it: an admission encoded
// directly, anything else as its CheckResponse.
func (a answer) encoded() any {
	if a.resp != nil {
		return a.resp
	}
	return encodeAdmitted(a.token, a.key)
}

// check answers r under pol.
func (s *Server) check(ctx context.Context, pol *Policy, r *request) (answer, error) {
	start := s.clock.Now()
	node, badNode := nodeOf(ctx)
	if badNode {
		s.inputs.InvalidInput(InputNode)
	}
	key := r.bulkhead
	conn, isConn := pol.connection(r)
	if isConn {
		key = conn.Bulkhead
	}

	l := s.bulkheads.Get(key)
	if l == nil {
		switch pol.Unmatched {
		case Allow:
			s.rec.Unmatched(UnmatchedAllowed)
			return respond(allowed()), nil
		case UseDefault:
			if l = s.bulkheads.Get(pol.DefaultBulkhead); l != nil {
				s.rec.Unmatched(UnmatchedDefaulted)
				key = pol.DefaultBulkhead
			}
		}
		if l == nil {
			s.rec.Unmatched(UnmatchedDenied)
			return respond(denied(pol, key, bulkhead.ReasonUnknownBulkhead)), nil
		}
	}

	if resp, refused := s.circuit(pol, l, key); refused {
		return respond(resp), nil
	}
	var prio bulkhead.Priority
	if isConn {
		prio = s.connectionPriority(conn, r)
	} else {
		prio = s.priority(pol, key, r)
	}
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d.Add(-pol.DeadlineMargin)
	}
	if s.shared != nil {
		return s.checkShared(ctx, pol, l, key, r, prio, deadline, node, start)
	}
	return s.admitLocal(ctx, pol, local{bulkheads: s.bulkheads, ledger: s.ledger}, l, key, r, prio, deadline, node, start)
}

// local is where admitLocal takes permits from and registers them.
type local struct {
	bulkheads Bulkheads
	ledger    Ledger
}

// admitLocal takes a permit from l (and from its tenant compartment in
// in.bulkheads) and registers it in in.ledger. The error is errNotAlone
// when in.ledger did not register it (aloneLedger): the caller answers.
func (s *Server) admitLocal(ctx context.Context, pol *Policy, in local, l *bulkhead.Limiter, key string, r *request,
	prio bulkhead.Priority, deadline time.Time, node string, start time.Time) (answer, error) {
	p, err := s.acquire(ctx, pol, in.bulkheads, l, key, r.tenant, prio, deadline)
	if err != nil {
		if r := bulkhead.ReasonOf(err); r != bulkhead.ReasonNone {
			return respond(denied(pol, key, r)), nil
		}
		// The Check's context ended while it waited: Envoy cancelled it
		// (the client went away) or its deadline passed. Nobody listens.
		return answer{}, status.FromContextError(err).Err()
	}
	token, err := in.ledger.Grant(p, permit.Grant{Bulkhead: key, Priority: prio, TTL: s.leaseTTL(pol, key, r.leaseTTL, node), Node: node})
	if errors.Is(err, errNotAlone) {
		p.Release()
		return answer{}, err
	}
	if err != nil {
		p.Release()
		s.log.Error("permit not registered", "bulkhead", key, "err", err)
		return answer{}, status.Errorf(codes.ResourceExhausted, "bulkhead: %v", err)
	}
	if err := ctx.Err(); err != nil {
		// Granted, but Envoy no longer waits for the answer: no access log
		// will carry this token, so give the permit back now.
		in.ledger.Release(token, permit.Cancel)
		return answer{}, status.FromContextError(err).Err()
	}
	s.rec.Waited(key, s.clock.Now().Sub(start))
	return answer{token: token, key: key}, nil
}
