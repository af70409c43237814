// Command noopauthz is the no-op baseline of the benchmark harness: an
// Envoy ext_authz server that answers every Check with OK at once, and an
// access-log service that reads and drops every entry (and an
// OpenTelemetry logs service whose Export drops its logs, for the
// harness's experiment with Envoy's OpenTelemetry access logger). It does what any
// ext_authz server must (a gRPC server, protobuf decoding and encoding)
// and nothing more, so the harness can tell the cost of the ext_authz hop
// itself from the cost of the bulkhead.
//
//	noopauthz --listen 127.0.0.1:0 --address-file addr.json [--metadata]
//
// With --metadata the OK carries dynamic metadata shaped like the
// bulkhead's (a 22-character permit token and the bulkhead's name), so that
// Envoy does exactly the work it does for the bulkhead: store the metadata,
// then send it back in the access-log entry.
//
// With --address-file it writes {"grpc":"127.0.0.1:PORT"} (temp file and
// rename) once the listener is bound. SIGTERM or SIGINT stop it gracefully.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	logsv1 "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("noopauthz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "gRPC listen address")
	addrFile := fs.String("address-file", "", "write the bound address here as JSON")
	metadata := fs.Bool("metadata", false, "answer with dynamic metadata shaped like the bulkhead's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "noopauthz: %v\n", err)
		return 1
	}
	// The daemon's keepalive policy, so that Envoy is treated the same.
	gs := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: 5 * time.Second, PermitWithoutStream: true}))
	answer := ok
	if *metadata {
		answer = okWithMetadata
	}
	authv3.RegisterAuthorizationServer(gs, authzServer{answer: answer})
	alsv3.RegisterAccessLogServiceServer(gs, alsServer{})
	logsv1.RegisterLogsServiceServer(gs, otelServer{})
	if *addrFile != "" {
		if err := writeAddress(*addrFile, ln.Addr().String()); err != nil {
			fmt.Fprintf(stderr, "noopauthz: address file: %v\n", err)
			ln.Close()
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "noopauthz: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop() // access-log streams stay open until Envoy closes them
		<-stopped
	}
	<-served
	return 0
}

// The answers are immutable, so shared by concurrent Checks.
var (
	ok = &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
	}
	okWithMetadata = &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"bulkhead_permit": structpb.NewStringValue("AAAAAAAAAAAAAAAAAAAAAA"),
			"bulkhead":        structpb.NewStringValue("bench"),
		}},
	}
)

type authzServer struct {
	authv3.UnimplementedAuthorizationServer
	answer *authv3.CheckResponse
}

func (s authzServer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return s.answer, nil
}

type alsServer struct {
	alsv3.UnimplementedAccessLogServiceServer
}

// StreamAccessLogs reads until Envoy closes the stream or the server stops.
func (alsServer) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
			}
			return nil
		}
	}
}

type otelServer struct {
	logsv1.UnimplementedLogsServiceServer
}

// Export takes and drops an OpenTelemetry access-log export.
func (otelServer) Export(context.Context, *logsv1.ExportLogsServiceRequest) (*logsv1.ExportLogsServiceResponse, error) {
	return &logsv1.ExportLogsServiceResponse{}, nil
}

func writeAddress(path, addr string) error {
	b, err := json.Marshal(map[string]string{"grpc": addr})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".noopauthz-addr-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
