package authz

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
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

// NodeHeader is the gRPC metadata key, on the Check RPC itself (not a
// request header of the client, which a client could forge), naming the
// Envoy node that asks. Envoy sends it when its ext_authz grpc_service has
//
//	initial_metadata: [{key: x-bulkhead-node, value: "<node.id>"}]
//
// It should equal the node.id that Envoy's access-log streams carry in
// their Identifier: the lease shows it as the permit's holder, and a node
// seen not to send periodic access-log entries gets the long lease for its
// permits (SilentNodes). Without it everything works the same, but permits
// name no holder until adopted.
const NodeHeader = "x-bulkhead-node"

// SilentNodes tells which Envoy nodes were seen not to send periodic
// access-log entries; *permit.SilentNodes is one.
type SilentNodes interface {
	Silent(node string) bool
}

// WithSilentNodes sets the nodes whose permits get the long lease instead
// of the heartbeat lease (default: none).
func WithSilentNodes(n SilentNodes) Option { return func(s *Server) { s.silent = n } }

type noSilentNodes struct{}

func (noSilentNodes) Silent(string) bool { return false }

// Breakers says whether a bulkhead's circuit breaker lets a Check through;
// *breaker.Set is one. When it does not, retryAfter is how long until it
// lets requests through again.
type Breakers interface {
	Allow(key string) (ok bool, retryAfter time.Duration)
}

// WithBreakers makes Checks ask b first, before any permit is taken
// (default: no breakers).
func WithBreakers(b Breakers) Option { return func(s *Server) { s.breakers = b } }

// InputRecorder counts request inputs the server distrusted or ignored. It
// is optional (WithInputRecorder); label values are configured bulkhead
// names and the bulkhead.Input constants only.
type InputRecorder interface {
	// UntrustedPriority counts a priority header that would have raised a
	// request's class above the route's (or the default) from a source
	// outside Policy.TrustedPrioritySources; the route's class was used.
	UntrustedPriority(dependency string)
	// InvalidInput counts an ignored value of input (bulkhead.InputTenant, bulkhead.InputNode).
	InvalidInput(input bulkhead.Input)
}

// WithInputRecorder sets the recorder of distrusted and ignored inputs
// (default: none).
func WithInputRecorder(r InputRecorder) Option {
	return func(s *Server) {
		if r != nil {
			s.inputs = r
		}
	}
}

type nopInputs struct{}

func (nopInputs) UntrustedPriority(string) {}

func (nopInputs) InvalidInput(bulkhead.Input) {}
