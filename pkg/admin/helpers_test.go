package admin_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFake() *admintest.Fake {
	return admintest.NewFake(func() time.Time { return t0 }, map[string]bulkhead.Settings{
		"catalog": {MaxConcurrent: 10, MaxQueue: 20, MaxWait: 500 * time.Millisecond, ReserveCritical: 0.2, ReserveNormal: 0.1},
		"auth":    {MaxConcurrent: 1, MaxQueue: 5},
	})
}

// logBuf collects log output; safe for concurrent use.
type logBuf struct{ testkit.SyncBuffer }

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fixture is an admin server over a fake controller.
type fixture struct {
	fake *admintest.Fake
	srv  *admin.Server
	logs *logBuf
}

func newFixture(t *testing.T, auth *admin.Authenticator, opts ...admin.Option) *fixture {
	t.Helper()
	if auth == nil {
		var err error
		if auth, err = admin.NewAuthenticator(); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{fake: newFake(), logs: &logBuf{}}
	f.srv = admin.New(f.fake, auth, f.logs.logger(), opts...)
	return f
}

// dial returns a gRPC client of addr over cleartext HTTP/2.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) adminv1.AdminServiceClient {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminv1.NewAdminServiceClient(cc)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
