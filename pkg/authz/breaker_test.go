package authz

import (
	"context"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

// TestCheckCircuitOpen: an open breaker refuses its bulkhead's Checks with
// reason circuit_open and the time left as retry-after, taking no permit;
// other bulkheads and a dry-run bulkhead go on.
func TestCheckCircuitOpen(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	set := breaker.NewSet(fc)
	bs := breaker.Settings{FailureRatio: 0.5, MinRequests: 1, Window: time.Second, OpenFor: 2500 * time.Millisecond, HalfOpenProbes: 1}
	set.Apply(map[string]breaker.Settings{"catalog": bs, "dry": bs})
	set.Record("catalog", true, 0)
	set.Record("dry", true, 0)
	dry := settings(1, 0, 0)
	dry.DryRun = true
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(2, 0, 0), "orders": settings(2, 0, 0), "dry": dry},
		policy: DefaultPolicy(), opts: []Option{WithBreakers(set)}})
	ctx := context.Background()

	resp, err := e.client.Check(ctx, forKey("catalog"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDenial(resp)
	if err != nil || d.headers[HeaderReason] != "circuit_open" || d.headers["retry-after"] != "3" {
		t.Fatalf("open breaker: %+v %v; want circuit_open, retry-after 3 (2.5s rounded up)", d, err)
	}
	if s := snap(t, e.reg, "catalog"); s.InUse != 0 || s.Rejected[bulkhead.ReasonCircuitOpen] != 1 {
		t.Fatalf("in use %d, circuit_open rejections %d; want 0, 1", s.InUse, s.Rejected[bulkhead.ReasonCircuitOpen])
	}
	resp, err = e.client.Check(ctx, forKey("orders"))
	wantAdmitted(t, resp, err, "orders")
	resp, err = e.client.Check(ctx, forKey("dry"))
	wantAdmitted(t, resp, err, "dry")
	if s := snap(t, e.reg, "dry"); s.WouldReject[bulkhead.ReasonCircuitOpen] != 1 || s.Rejected[bulkhead.ReasonCircuitOpen] != 0 {
		t.Fatalf("dry run: would reject %v, rejected %v", s.WouldReject, s.Rejected)
	}

	fc.Advance(2500 * time.Millisecond) // half-open: one probe
	resp, err = e.client.Check(ctx, forKey("catalog"))
	wantAdmitted(t, resp, err, "catalog")
	resp, err = e.client.Check(ctx, forKey("catalog"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := parseDenial(resp); err != nil || d.headers[HeaderReason] != "circuit_open" {
		t.Fatalf("second Check while half-open: %+v %v", d, err)
	}
}
