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

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
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

// Recorder receives what the server measures; *metrics.Metrics is one.
type Recorder interface {
	Waited(dependency string, d time.Duration)
	InvalidPriority(dependency string)
	Unmatched(outcome bulkhead.UnmatchedOutcome)
	// InvalidLeaseTTL counts a route lease_ttl that was not a positive
	// duration (ignored) or was above the cap (cut to it).
	InvalidLeaseTTL(dependency string)
}

// Server answers Envoy's Check calls.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	bulkheads Bulkheads
	ledger    admission.Ledger
	rec       Recorder
	breakers  Breakers // nil: none
	clock     clock.Clock
	log       *slog.Logger
	silent    SilentNodes   // never nil
	inputs    InputRecorder // never nil
	policy    atomic.Pointer[Policy]
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithClock sets the clock used to measure waits (default: real).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// New returns a server answering with policy pol, with the bulkheads of b
// and the permits of l.
func New(b Bulkheads, l admission.Ledger, rec Recorder, pol Policy, opts ...Option) *Server {
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
		s.inputs.InvalidInput(bulkhead.InputNode)
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
			s.rec.Unmatched(bulkhead.UnmatchedAllowed)
			return respond(allowed()), nil
		case UseDefault:
			if l = s.bulkheads.Get(pol.DefaultBulkhead); l != nil {
				s.rec.Unmatched(bulkhead.UnmatchedDefaulted)
				key = pol.DefaultBulkhead
			}
		}
		if l == nil {
			s.rec.Unmatched(bulkhead.UnmatchedDenied)
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
	req := admission.Request{Bulkhead: l, Priority: prio, Node: node, Lease: s.leaseTTL(pol, key, r.leaseTTL, node)}
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d.Add(-pol.DeadlineMargin)
	}
	req.Tenants, req.Tenant = s.tenantOf(pol, key, r.tenant)
	return s.admit(ctx, pol, req, start)
}

// admit asks the ledger for req's permit and answers with it.
func (s *Server) admit(ctx context.Context, pol *Policy, req admission.Request, start time.Time) (answer, error) {
	key := req.Bulkhead.Name()
	a, err := s.ledger.Admit(ctx, req)
	switch {
	case err == nil && a.Unguarded:
		return respond(allowed()), nil
	case err == nil:
		s.rec.Waited(key, s.clock.Now().Sub(start))
		return answer{token: a.Token, key: key}, nil
	}
	if reason := bulkhead.ReasonOf(err); reason != bulkhead.ReasonNone {
		return respond(denied(pol, key, reason)), nil
	}
	if ctx.Err() != nil {
		// The Check's context ended while it waited (Envoy cancelled it:
		// the client went away) or just after its permit was granted, or
		// its deadline passed. Nobody listens.
		return answer{}, status.FromContextError(ctx.Err()).Err()
	}
	s.log.Error("no permit", "bulkhead", key, "err", err)
	if errors.Is(err, permit.ErrFull) || errors.Is(err, permit.ErrClosed) {
		return answer{}, status.Errorf(codes.ResourceExhausted, "bulkhead: %v", err)
	}
	return answer{}, status.Errorf(codes.Internal, "bulkhead: %v", err)
}
