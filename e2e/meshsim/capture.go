package meshsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/envoyproc"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testbed"
)

// The files Capture writes (and the simulator embeds, templates.go).
const (
	captureCheck     = "check.txtpb"           // the first CheckRequest
	captureRelease   = "release.txtpb"         // the release log's first message: identifier and an end entry
	captureHeartbeat = "heartbeat.txtpb"       // the heartbeat log's first message: identifier and a periodic entry
	captureMetadata  = "check-metadata.txt"    // the Check's gRPC metadata, key: value lines
	captureRoute     = "catalog"               // the captured route's bulkhead
	captureTenant    = "x-tenant-id"           // the tenant header the capture sends
	captureDelay     = 1500 * time.Millisecond // long enough for a periodic entry
)

// ErrCapture is wrapped by Capture's errors.
var ErrCapture = errors.New("capture")

// Capture runs a real Envoy (envoyBin; "" = envoyproc.FindBinary) with the
// shipped bootstrap in front of a server that records what it receives,
// sends one request of captureDelay through it, and writes the first Check,
// the first message of each access-log stream and the Check's metadata
// into dir, as text protos. It takes a few seconds.
func Capture(ctx context.Context, envoyBin, dir string) error {
	rec := &recorder{done: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, rec)
	alsv3.RegisterAccessLogServiceServer(gs, rec)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(ln) })
	defer wg.Wait()
	defer gs.Stop()

	up, err := testbed.NewUpstream(captureRoute, "")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	defer up.Close()
	upEP, err := endpointOf(up.Addr())
	if err != nil {
		return err
	}
	sideEP, err := endpointOf(ln.Addr().String())
	if err != nil {
		return err
	}
	bootstrap, err := envoy.Render(envoy.Params{NodeID: "meshsim-capture", Bulkhead: sideEP,
		Routes: []envoy.Route{{Name: captureRoute, Prefix: "/" + captureRoute, Upstream: upEP}}})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	proxy, err := envoyproc.Start(ctx, envoyproc.Options{Binary: envoyBin, ConfigYAML: bootstrap, Concurrency: 1})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	defer func() { _ = proxy.Stop(context.WithoutCancel(ctx)) }()
	addr, err := proxy.ListenerAddr(ctx, envoy.DefaultListenerName)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/"+captureRoute+"/items?page=2", nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	req.Header.Set(testbed.HeaderDelay, captureDelay.String())
	req.Header.Set(captureTenant, "tenant-0007")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: request through Envoy: %w", ErrCapture, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: request through Envoy: status %d", ErrCapture, resp.StatusCode)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case <-rec.done:
	case <-wait.Done():
		return fmt.Errorf("%w: not every message came: %w", ErrCapture, wait.Err())
	}
	return rec.write(dir)
}

func endpointOf(addr string) (envoy.Endpoint, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return envoy.Endpoint{}, fmt.Errorf("%w: %w", ErrCapture, err)
	}
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		return envoy.Endpoint{}, fmt.Errorf("%w: port %q: %w", ErrCapture, port, err)
	}
	return envoy.Endpoint{Host: host, Port: p}, nil
}

// recorder answers Checks OK with a permit's metadata and keeps the first
// message of each kind.
type recorder struct {
	authv3.UnimplementedAuthorizationServer
	alsv3.UnimplementedAccessLogServiceServer

	mu                  sync.Mutex
	check               *authv3.CheckRequest
	md                  metadata.MD
	release, heartbeat  *alsv3.StreamAccessLogsMessage
	sawEnd, sawPeriodic bool
	done                chan struct{} // closed once every message came
	closed              bool
}

func (r *recorder) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	if r.check == nil {
		r.check, r.md = req, md
	}
	r.mu.Unlock()
	meta, err := structpb.NewStruct(map[string]any{
		permit.MetadataToken:    "capture-token-0001",
		permit.MetadataBulkhead: req.GetAttributes().GetContextExtensions()["bulkhead"],
	})
	if err != nil {
		return nil, err
	}
	return &authv3.CheckResponse{Status: &status.Status{},
		HttpResponse:    &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
		DynamicMetadata: meta}, nil
}

func (r *recorder) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		name := msg.GetIdentifier().GetLogName()
		switch {
		case name == "bulkhead" && r.release == nil:
			r.release = msg
		case name == "bulkhead-heartbeat" && r.heartbeat == nil:
			r.heartbeat = msg
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			switch e.GetCommonProperties().GetAccessLogType().String() {
			case "DownstreamEnd":
				r.sawEnd = true
			case "DownstreamPeriodic":
				r.sawPeriodic = true
			}
		}
		if !r.closed && r.check != nil && r.release != nil && r.heartbeat != nil && r.sawEnd && r.sawPeriodic {
			r.closed = true
			close(r.done)
		}
		r.mu.Unlock()
	}
}

func (r *recorder) write(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	opts := prototext.MarshalOptions{Multiline: true, Indent: "  "}
	for name, m := range map[string]proto.Message{captureCheck: r.check, captureRelease: r.release, captureHeartbeat: r.heartbeat} {
		b, err := opts.Marshal(m)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCapture, name, err)
		}
		header := "# Captured from Envoy 1.40 by meshsim.Capture (go run ./e2e/meshsim/cmd/meshsim capture).\n"
		if err := os.WriteFile(filepath.Join(dir, name), append([]byte(header), b...), 0o644); err != nil {
			return fmt.Errorf("%w: %w", ErrCapture, err)
		}
	}
	var md strings.Builder
	for k, vs := range r.md {
		for _, v := range vs {
			fmt.Fprintf(&md, "%s: %s\n", k, v)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, captureMetadata), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	return nil
}
