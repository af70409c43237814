package testkit

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Bufconn is a gRPC server on an in-memory listener.
type Bufconn struct {
	lis *bufconn.Listener
}

// ServeBufconn serves gs (its services registered) on an in-memory
// listener until the test ends. The cleanup stops gs and waits for Serve,
// failing the test if Serve returned an error.
func ServeBufconn(tb testing.TB, gs *grpc.Server) *Bufconn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	tb.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return &Bufconn{lis: lis}
}

// Dial returns a client connection to the server, without transport
// security, with opts; it is closed when the test ends (before the server
// stops, when ServeBufconn was called first).
func (b *Bufconn) Dial(tb testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	opts = append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return b.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		tb.Fatalf("NewClient: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
