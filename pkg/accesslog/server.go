package accesslog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// Namespace and key under which the ext_authz answer stored the token.
const (
	Namespace = "envoy.filters.http.ext_authz"
	TokenKey  = "bulkhead_permit"
)

// Outcome is how an admitted request ended.
type Outcome uint8

// The outcomes.
const (
	Success Outcome = iota
	Failure
	Aborted
)

// Ledger releases permits by token; *permit.Ledger is one.
type Ledger interface {
	Release(token string, src permit.Source) (permit.Lease, permit.Result)
}

// Recorder receives what the server sees; *metrics.Metrics is one.
type Recorder interface {
	Outcome(dependency string, o Outcome)
	// ReleaseLag records how long a permit released by an access-log entry
	// was held beyond its upstream's own work: its hold time less the time
	// from the first byte Envoy sent upstream to the last it received. It
	// is recorded only for entries that report both.
	ReleaseLag(dependency string, d time.Duration)
	LogEntry(result EntryResult)
	StreamOpened()
	StreamClosed()
}

// Server receives Envoy's access-log streams.
type Server struct {
	alsv3.UnimplementedAccessLogServiceServer

	ledger Ledger
	rec    Recorder
	log    *slog.Logger
	nodes  *Nodes
	clock  clock.Clock
}

var _ alsv3.AccessLogServiceServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithNodes makes the server report each stream's node to n, so that the
// permits of a node whose streams are all gone are reclaimed. nil (the
// default) turns node tracking off.
func WithNodes(n *Nodes) Option { return func(s *Server) { s.nodes = n } }

// WithClock sets the clock that times release lags; it must be the
// ledger's (default: real).
func WithClock(c clock.Clock) Option { return func(s *Server) { s.clock = c } }

// New returns a server releasing through l.
func New(l Ledger, rec Recorder, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ledger: l, rec: rec, log: log, clock: clock.Real{}}
	for _, o := range opts {
		o(s)
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
	node, logName := "", ""
	tracked := false
	defer func() {
		if tracked {
			s.nodes.Closed(node)
		}
	}()
	var msg message
	for {
		err := recv(&msg)
		switch {
		case errors.Is(err, io.EOF):
			return done()
		case err != nil:
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				s.log.Debug("access-log stream ended", "node", node, "log_name", logName)
				return nil
			}
			s.log.Warn("access-log stream broken", "node", node, "log_name", logName, "err", err)
			return err
		}
		if msg.identified && node == "" {
			// Only the first message of a stream carries the identifier.
			node, logName = msg.node, msg.logName
			s.log.Debug("access-log stream opened", "node", truncate(node), "log_name", truncate(logName))
			if s.nodes != nil {
				if tracked = s.nodes.Opened(node); !tracked && node != "" && !ValidNodeID(node) {
					s.log.Warn("access-log stream of an invalid node id: its permits end by lease only",
						"node", truncate(node), "log_name", truncate(logName))
				}
			}
		}
		for i := range msg.http {
			s.entry(&msg.http[i])
		}
		for range msg.tcp {
			s.rec.LogEntry(EntryTCPIgnored)
		}
	}
}

// truncate bounds a value from the wire before it is logged.
func truncate(v string) string {
	if len(v) > MaxNodeIDLen {
		return v[:MaxNodeIDLen] + "..."
	}
	return v
}

func (s *Server) entry(e *entry) {
	if !e.end {
		s.rec.LogEntry(EntryNotEnd)
		return
	}
	if e.token == "" {
		s.rec.LogEntry(EntryNoToken)
		return
	}
	lease, res := s.ledger.Release(e.token, permit.AccessLog)
	switch res {
	case permit.Released:
		s.rec.LogEntry(EntryReleased)
		s.rec.Outcome(lease.Bulkhead, outcome(e))
		if up, ok := e.upstream(); ok {
			s.rec.ReleaseLag(lease.Bulkhead, max(0, s.clock.Now().Sub(lease.Acquired)-up))
		}
	case permit.Duplicate:
		s.rec.LogEntry(EntryDuplicate)
	default:
		s.rec.LogEntry(EntryUnknown)
	}
}

// outcome classifies an ended request: a 5xx, or an upstream/local reset or
// timeout, is a failure; otherwise a client that went away before the
// response was complete (before or during the body) is an abort; a request
// with no response at all is a failure; anything else is a success.
func outcome(e *entry) Outcome {
	f := e.flags
	upstreamTrouble := f.has(flagUpstreamRequestTimeout) || f.has(flagLocalReset) || f.has(flagUpstreamRemoteReset) ||
		f.has(flagUpstreamConnectionFailure) || f.has(flagUpstreamConnectionTermination) || f.has(flagUpstreamOverflow) ||
		f.has(flagNoHealthyUpstream) || f.has(flagStreamIdleTimeout) || f.has(flagUpstreamMaxStreamDurationReached) ||
		f.has(flagDurationTimeout) || f.has(flagUpstreamProtocolError) || f.has(flagUpstreamRetryLimitExceeded)
	switch {
	case e.code >= 500, upstreamTrouble:
		return Failure
	case f.has(flagDownstreamConnectionTermination) || f.has(flagDownstreamRemoteReset):
		return Aborted
	case e.code == 0:
		return Failure
	default:
		return Success
	}
}

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
