package admin_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// field returns the first field violation of err's status.
func field(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func TestGRPC(t *testing.T) {
	f := newFixture(t, nil)
	f.fake.Mutate("catalog", func(st *admin.Status) {
		st.Snapshot.InUse = 3
		st.Snapshot.Admitted[0], st.Snapshot.Admitted[1] = 5, 7
		st.Snapshot.Rejected[1] = 2 // queue_full
		st.Outcomes = &admin.Outcomes{Success: 9, Failure: 1}
		st.Tenants = 4
	})
	c := dial(t, admintest.Start(t, f.srv))
	ctx := testCtx(t)

	list, err := c.ListBulkheads(ctx, &adminv1.ListBulkheadsRequest{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.GetBulkheads()) != 2 || list.GetBulkheads()[0].GetName() != "auth" || list.GetBulkheads()[1].GetName() != "catalog" {
		t.Fatalf("list: %v", list)
	}
	cat := list.GetBulkheads()[1]
	if cat.GetInUse() != 3 || cat.GetCounters().GetAdmitted().GetNormal() != 7 || cat.GetCounters().GetRejected().GetQueueFull() != 2 ||
		cat.GetOutcomes().GetFailure() != 1 || cat.GetTenants() != 4 || cat.GetSettings().GetMaxWait().AsDuration() != 500*time.Millisecond {
		t.Errorf("catalog: %v", cat)
	}

	got, err := c.GetBulkhead(ctx, &adminv1.GetBulkheadRequest{Name: "auth"})
	if err != nil || got.GetBulkhead().GetSettings().GetMaxQueue() != 5 || got.GetBulkhead().GetOverride() != nil {
		t.Fatalf("get: %v, %v", got, err)
	}

	up, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", MaxConcurrent: proto.Int32(4), MaxWait: durationpb.New(time.Second)})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	b := up.GetBulkhead()
	if b.GetSettings().GetMaxConcurrent() != 4 || b.GetSettings().GetMaxQueue() != 20 || b.GetSettings().GetMaxWait().AsDuration() != time.Second ||
		b.GetFileSettings().GetMaxConcurrent() != 10 || up.GetPrevious().GetSettings().GetMaxConcurrent() != 10 {
		t.Errorf("update: %v", up)
	}
	if a := b.GetOverride().GetActor(); !strings.HasPrefix(a, "local from 127.0.0.1:") {
		t.Errorf("actor %q", a)
	}
	if !b.GetOverride().GetTime().AsTime().Equal(t0) {
		t.Errorf("override time %v", b.GetOverride().GetTime().AsTime())
	}

	rs, err := c.ResetBulkhead(ctx, &adminv1.ResetBulkheadRequest{Name: "catalog"})
	if err != nil || rs.GetBulkhead().GetOverride() != nil || rs.GetBulkhead().GetSettings().GetMaxConcurrent() != 10 ||
		rs.GetPrevious().GetSettings().GetMaxConcurrent() != 4 {
		t.Fatalf("reset: %v, %v", rs, err)
	}
}

func TestGRPCErrors(t *testing.T) {
	f := newFixture(t, nil)
	c := dial(t, admintest.Start(t, f.srv))
	ctx := testCtx(t)
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"get unknown", func() error { _, err := c.GetBulkhead(ctx, &adminv1.GetBulkheadRequest{Name: "nope"}); return err }, codes.NotFound, ""},
		{"get no name", func() error { _, err := c.GetBulkhead(ctx, &adminv1.GetBulkheadRequest{}); return err }, codes.InvalidArgument, "name"},
		{"update unknown", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "nope", MaxQueue: proto.Int32(1)})
			return err
		}, codes.NotFound, ""},
		{"update nothing", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog"})
			return err
		}, codes.InvalidArgument, ""},
		{"update zero limit", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", MaxConcurrent: proto.Int32(0)})
			return err
		}, codes.InvalidArgument, "max_concurrent"},
		{"update negative wait", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", MaxWait: durationpb.New(-time.Second)})
			return err
		}, codes.InvalidArgument, "max_wait"},
		{"update invalid duration", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", MaxWait: &durationpb.Duration{Seconds: 1, Nanos: -1}})
			return err
		}, codes.InvalidArgument, "max_wait"},
		{"update reserve", func() error {
			_, err := c.UpdateBulkhead(ctx, &adminv1.UpdateBulkheadRequest{Name: "catalog", ReserveNormal: proto.Float64(1)})
			return err
		}, codes.InvalidArgument, "reserve_normal"},
		{"reset unknown", func() error { _, err := c.ResetBulkhead(ctx, &adminv1.ResetBulkheadRequest{Name: "nope"}); return err }, codes.NotFound, ""},
		{"watch interval too short", func() error {
			s, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{Interval: durationpb.New(time.Millisecond)})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, codes.InvalidArgument, "interval"},
		{"watch interval too long", func() error {
			s, err := c.WatchBulkheads(ctx, &adminv1.WatchBulkheadsRequest{Interval: durationpb.New(time.Hour)})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, codes.InvalidArgument, "interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if field(err) != tc.field {
				t.Errorf("field %q, want %q (%v)", field(err), tc.field, err)
			}
			if tc.field != "" && !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Errorf("message %q does not name %q", status.Convert(err).Message(), tc.field)
			}
		})
	}
	if n := len(f.fake.Calls()); n != 0 {
		t.Errorf("refused calls changed something: %q", f.fake.Calls())
	}
}
