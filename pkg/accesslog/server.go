package accesslog

import (
	"context"
	"errors"
	"io"
	"log/slog"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	LogEntry(result string)
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
}

var _ alsv3.AccessLogServiceServer = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithNodes makes the server report each stream's node to n, so that the
// permits of a node whose streams are all gone are reclaimed. nil (the
// default) turns node tracking off.
func WithNodes(n *Nodes) Option { return func(s *Server) { s.nodes = n } }

// New returns a server releasing through l.
func New(l Ledger, rec Recorder, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ledger: l, rec: rec, log: log}
	for _, o := range opts {
		o(s)
	}
	return s
}

// StreamAccessLogs implements alsv3.AccessLogServiceServer. It reads until
// Envoy closes the stream or the server stops.
func (s *Server) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	s.rec.StreamOpened()
	defer s.rec.StreamClosed()
	node, logName := "", ""
	tracked := false
	defer func() {
		if tracked {
			s.nodes.Closed(node)
		}
	}()
	for {
		msg, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		case err != nil:
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				s.log.Debug("access-log stream ended", "node", node, "log_name", logName)
				return nil
			}
			s.log.Warn("access-log stream broken", "node", node, "log_name", logName, "err", err)
			return err
		}
		if id := msg.GetIdentifier(); id != nil && node == "" {
			// Only the first message of a stream carries the identifier.
			node, logName = id.GetNode().GetId(), id.GetLogName()
			s.log.Debug("access-log stream opened", "node", truncate(node), "log_name", truncate(logName))
			if s.nodes != nil {
				if tracked = s.nodes.Opened(node); !tracked && node != "" && !ValidNodeID(node) {
					s.log.Warn("access-log stream of an invalid node id: its permits end by lease only",
						"node", truncate(node), "log_name", truncate(logName))
				}
			}
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			s.entry(e)
		}
		if n := len(msg.GetTcpLogs().GetLogEntry()); n > 0 {
			for range n {
				s.rec.LogEntry("tcp_ignored")
			}
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

func (s *Server) entry(e *datav3.HTTPAccessLogEntry) {
	cp := e.GetCommonProperties()
	if cp.GetAccessLogType() != datav3.AccessLogType_DownstreamEnd {
		s.rec.LogEntry("not_end")
		return
	}
	token := cp.GetMetadata().GetFilterMetadata()[Namespace].GetFields()[TokenKey].GetStringValue()
	if token == "" {
		s.rec.LogEntry("no_token")
		return
	}
	lease, res := s.ledger.Release(token, permit.AccessLog)
	switch res {
	case permit.Released:
		s.rec.LogEntry("released")
		s.rec.Outcome(lease.Bulkhead, outcome(e))
	case permit.Duplicate:
		s.rec.LogEntry("duplicate")
	default:
		s.rec.LogEntry("unknown")
	}
}

// outcome classifies an ended request: a 5xx, or an upstream/local reset or
// timeout, is a failure; otherwise a client that went away before the
// response was complete (before or during the body) is an abort; a request
// with no response at all is a failure; anything else is a success.
func outcome(e *datav3.HTTPAccessLogEntry) Outcome {
	code := e.GetResponse().GetResponseCode().GetValue()
	f := e.GetCommonProperties().GetResponseFlags()
	upstreamTrouble := f.GetUpstreamRequestTimeout() || f.GetLocalReset() || f.GetUpstreamRemoteReset() ||
		f.GetUpstreamConnectionFailure() || f.GetUpstreamConnectionTermination() || f.GetUpstreamOverflow() ||
		f.GetNoHealthyUpstream() || f.GetStreamIdleTimeout() || f.GetUpstreamMaxStreamDurationReached() ||
		f.GetDurationTimeout() || f.GetUpstreamProtocolError() || f.GetUpstreamRetryLimitExceeded()
	switch {
	case code >= 500, upstreamTrouble:
		return Failure
	case f.GetDownstreamConnectionTermination() || f.GetDownstreamRemoteReset():
		return Aborted
	case code == 0:
		return Failure
	default:
		return Success
	}
}
