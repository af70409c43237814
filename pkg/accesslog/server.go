package accesslog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Recorder receives what the server sees; *metrics.Metrics is one.
type Recorder interface {
	Outcome(dependency string, o bulkhead.Outcome)
	// ReleaseLag records how long a permit released by an access-log entry
	// was held beyond its upstream's own work: its hold time less the time
	// from the first byte Envoy sent upstream to the last it received. It
	// is recorded only for entries that report both.
	ReleaseLag(dependency string, d time.Duration)
	LogEntry(result permit.EntryResult)
	StreamOpened()
	StreamClosed()
	// Adopted counts a running request's permit taken from its periodic
	// entry (after a restart, or after its lease expired under it).
	Adopted(dependency string)
	// HeartbeatProblem counts a sign that an Envoy does not keep its
	// permits' leases alive.
	HeartbeatProblem(problem permit.HeartbeatProblem)
}

// Server receives Envoy's access-log streams.
type Server struct {
	alsv3.UnimplementedAccessLogServiceServer

	ledger    admission.Ledger
	rec       Recorder
	log       *slog.Logger
	clock     clock.Clock
	heartbeat permit.Heartbeat
	silent    *permit.SilentNodes // nil: silent nodes are not remembered
	calls     Calls               // nil: no one
	nodes     *heardNodes         // the nodes that send periodic entries; nil with heartbeats off
	// hearsAll: since when this replica hears every periodic entry of its
	// permits (nil: always; WithHearing).
	hearsAll func() time.Time
}

var _ alsv3.AccessLogServiceServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithHeartbeat makes periodic entries renew their permits' leases (or
// adopt them: admission.Ledger.Renew). Default: periodic entries are
// ignored. It must be the ledger's.
func WithHeartbeat(h permit.Heartbeat) Option {
	return func(s *Server) { s.heartbeat = h }
}

// WithSilentNodes sets where nodes that send no periodic entries are
// remembered (and logged once); default: nowhere (still counted).
func WithSilentNodes(n *permit.SilentNodes) Option { return func(s *Server) { s.silent = n } }

// WithHearing sets since when this replica hears every periodic entry of
// the permits it holds (the shared ledger's HearsAllSince: entries that
// went to other replicas while it could not reach Redis never reached it).
// A permit held before then, or an expiry within a TTL of it, says nothing
// of whether its node sends periodic entries. Default: it always heard
// them.
func WithHearing(since func() time.Time) Option { return func(s *Server) { s.hearsAll = since } }

// WithClock sets the clock that times release lags; it must be the
// ledger's (default: real).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// New returns a server releasing through l.
func New(l admission.Ledger, rec Recorder, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ledger: l, rec: rec, log: log, clock: clock.Real{}}
	for _, o := range opts {
		o(s)
	}
	if s.heartbeat.On() {
		s.nodes = newHeardNodes(s.heartbeat.TTL)
	}
	return s
}

// StreamAccessLogs implements alsv3.AccessLogServiceServer. A server
// registered with Register reads Envoy's streams without decoding whole
// messages (see streamHandler), through the same loop.
func (s *Server) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	return s.serve(func(m *message) error {
		msg, err := stream.Recv()
		if err == nil {
			messageOf(msg, m)
		}
		return err
	}, func() error { return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{}) })
}

// serve reads messages with recv until Envoy closes the stream (then it
// answers with done) or the server stops.
func (s *Server) serve(recv func(*message) error, done func() error) error {
	s.rec.StreamOpened()
	defer s.rec.StreamClosed()
	st := stream{}
	s.open(&st)
	var msg message
	for {
		err := recv(&msg)
		switch {
		case errors.Is(err, io.EOF):
			return done()
		case err != nil:
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				s.log.Debug("access-log stream ended", "node", truncate(st.node), "log_name", truncate(st.logName))
				return nil
			}
			s.log.Warn("access-log stream broken", "node", truncate(st.node), "log_name", truncate(st.logName), "err", err)
			return err
		}
		if msg.identified && !st.identified {
			// Only the first message of a stream carries the identifier.
			st.identified, st.node, st.logName = true, msg.node, msg.logName
			s.log.Debug("access-log stream opened", "node", truncate(st.node), "log_name", truncate(st.logName))
		}
		for i := range msg.entries {
			s.entry(&st, &msg.entries[i])
		}
		if st.move.Load() {
			// The rest of this message is lost, as it would be here: Envoy
			// sends its next entries on a new stream, to a replica that can
			// renew them before their leases end (finding 0 of the fault
			// issue: kept here, the others admit past the limit).
			// Counted (entries ledger_unavailable); the replica logged its
			// outage once, and Envoy may reopen a stream here per entry.
			s.log.Debug("access-log stream closed: this replica cannot reach the shared ledger, Envoy reopens it at another",
				"node", truncate(st.node), "log_name", truncate(st.logName))
			return status.Error(codes.Unavailable, "bulkhead: this replica cannot reach the shared ledger")
		}
	}
}

// truncate bounds a value from the wire before it is logged.
func truncate(v string) string {
	if len(v) > permit.MaxNodeIDLen {
		return v[:permit.MaxNodeIDLen] + "..."
	}
	return v
}

// stream is what the server knows of one access-log stream: each Envoy
// worker opens its own, and names its node in the first message only.
type stream struct {
	identified    bool
	node, logName string
	sawPeriodic   bool      // a periodic entry with a token came on this stream
	heardAt       time.Time // when this stream last recorded its node in Server.nodes
	// move: the ledger could not reach its store for an entry of this
	// stream (permit.Unavailable). The stream ends after its message, so
	// that Envoy's next entries renew their leases at another replica
	// rather than wait here while the leases run out. Set by the ledger's
	// callbacks, possibly from another goroutine.
	move *atomic.Bool
	// renewals answers every renewal of the stream (admission.Done).
	renewals *streamRenewals
}

// open readies st for its entries' answers.
func (s *Server) open(st *stream) {
	st.move = new(atomic.Bool)
	st.renewals = &streamRenewals{s: s, move: st.move}
}

func (s *Server) entry(st *stream, e *entry) {
	if st.renewals == nil {
		s.open(st)
	}
	switch {
	case e.periodic && e.token != "" && s.heartbeat.On():
		s.renew(st, e)
	case !e.end:
		s.rec.LogEntry(permit.EntryNotEnd)
	case e.token == "":
		s.rec.LogEntry(permit.EntryNoToken)
	default:
		s.release(st, e)
	}
}

// release ends the permit of an end entry.
func (s *Server) release(st *stream, e *entry) {
	// The ledger may answer from another goroutine, after the buffers of
	// st and e are reused: the answer gets copies.
	p := pendingEnds.Get().(*pendingEnd)
	p.s, p.st, p.e = s, *st, *e
	p.e.bulkhead = nil
	s.ledger.Release(admission.Entry{Bulkhead: e.bulkhead, Token: e.token}, p)
}

// renew renews the lease of a request Envoy says is running; the ledger
// adopts its permit when it does not hold it (the daemon restarted since
// the grant, or the lease expired while the request ran).
func (s *Server) renew(st *stream, e *entry) {
	st.sawPeriodic = true
	// The node sends periodic entries (again, if it was taken for silent):
	// recorded a few times an interval per stream at most, so that a batch
	// of entries takes the locks once.
	node := ""
	if permit.ValidNodeID(st.node) {
		node = st.node
	}
	if now := s.clock.Now(); now.Sub(st.heardAt) >= s.heartbeat.Interval/4 {
		st.heardAt = now
		s.silent.Heard(st.node)
		if node != "" {
			s.nodes.heard(node, now)
		}
	}
	s.ledger.Renew(admission.Entry{Bulkhead: e.bulkhead, Token: e.token, Node: node}, st.renewals)
}

// StreamMethod is the full gRPC method name of Envoy's access-log streams.
var StreamMethod = "/" + serviceDesc.ServiceName + "/" + serviceDesc.Streams[0].StreamName

// Register registers s as envoy.service.accesslog.v3.AccessLogService on
// gs. The gRPC server must be built with wire.ServerCodec(): messages are
// read straight from their encoding (message.UnmarshalWire), taking only
// the few fields a release needs. Without the codec every stream fails.
func Register(gs grpc.ServiceRegistrar, s *Server) {
	gs.RegisterService(&serviceDesc, s)
}

// serviceDesc is alsv3.AccessLogService_ServiceDesc with streamHandler.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: alsv3.AccessLogService_ServiceDesc.ServiceName,
	HandlerType: (*alsv3.AccessLogServiceServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "StreamAccessLogs",
		Handler:       streamHandler,
		ClientStreams: true,
	}},
	Metadata: alsv3.AccessLogService_ServiceDesc.Metadata,
}

func streamHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).serve(
		func(m *message) error { return stream.RecvMsg(m) },
		func() error { return stream.SendMsg(&alsv3.StreamAccessLogsResponse{}) })
}
