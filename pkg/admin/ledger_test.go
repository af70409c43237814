package admin_test

import (
	"net/http/httptest"
	"testing"

	"github.com/bulkhead-mesh/bulkhead/pkg/admin"
	"github.com/bulkhead-mesh/bulkhead/pkg/admin/admintest"
	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// ListBulkheads names the ledger as WithLedger reports it, capacity leases
// included, over gRPC and in the JSON API alike.
func TestListLedger(t *testing.T) {
	for _, tc := range []struct {
		name string
		info admin.LedgerInfo
	}{
		{"memory", admin.LedgerInfo{Backend: "memory", State: "strict", Replicas: 1}},
		{"redis with capacity leases", admin.LedgerInfo{Backend: "redis", State: "strict", Replicas: 2, OnUnavailable: "fail_closed", CapacityLeases: true}},
		{"redis per request", admin.LedgerInfo{Backend: "redis", State: "unavailable", Replicas: 3, OnUnavailable: "fail_open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, admin.WithLedger(func() admin.LedgerInfo { return tc.info }))
			list, err := dial(t, admintest.Start(t, f.srv)).ListBulkheads(testCtx(t), &adminv1.ListBulkheadsRequest{})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			l := list.GetLedger()
			if l.GetBackend() != tc.info.Backend || l.GetState() != tc.info.State || int(l.GetReplicas()) != tc.info.Replicas ||
				l.GetOnUnavailable() != tc.info.OnUnavailable || l.GetCapacityLeases() != tc.info.CapacityLeases {
				t.Errorf("gRPC ledger %v, want %+v", l, tc.info)
			}

			ts := httptest.NewServer(f.srv.Handler())
			defer ts.Close()
			want := map[string]any{"ledger.backend": tc.info.Backend, "ledger.state": tc.info.State,
				"ledger.replicas": float64(tc.info.Replicas), "ledger.capacity_leases": tc.info.CapacityLeases}
			if tc.info.OnUnavailable != "" {
				want["ledger.on_unavailable"] = tc.info.OnUnavailable
			}
			do(t, ts.Client(), "GET", ts.URL+"/v1/bulkheads", "", nil).check(t, "JSON list", want)
		})
	}
}
