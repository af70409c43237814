package authz

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

// A Check queued with max_wait 0 waits until its gRPC deadline less the
// margin, and Envoy gets a timeout denial before its own deadline.
func TestCheckDeadlineTimeoutIsADenial(t *testing.T) {
	const deadline, margin = 300 * time.Millisecond, 50 * time.Millisecond
	pol := DefaultPolicy()
	pol.DeadlineMargin = margin
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 4, 0)}, policy: pol})
	hold(t, e.reg, "catalog", 1)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	resp, err := e.client.Check(ctx, forKey("catalog"))
	elapsed := time.Since(start)
	wantDenial(t, resp, err, 503, "timeout", "catalog")
	if elapsed >= deadline {
		t.Fatalf("denial after %v, not before the %v deadline", elapsed, deadline)
	}
	if elapsed < deadline/3 {
		t.Errorf("denial after %v: it did not wait for the deadline less the margin", elapsed)
	}
	if s := snap(t, e.reg, "catalog"); s.QueuedTotal() != 0 || s.InUse != 1 || s.Rejected[bulkhead.ReasonTimeout] != 1 {
		t.Errorf("after timeout: %+v", s)
	}
}

// A deadline already inside the margin: no wait, an immediate timeout
// denial, and nobody is shed.
func TestCheckDeadlineInsideMargin(t *testing.T) {
	pol := DefaultPolicy()
	pol.DeadlineMargin = 900 * time.Millisecond
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 4, 0)}, policy: pol})

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// Admission that needs no wait still succeeds.
	resp, err := e.client.Check(ctx, forKey("catalog"))
	wantAdmitted(t, resp, err, "catalog")
	resp, err = e.client.Check(ctx, forKey("catalog"))
	wantDenial(t, resp, err, 503, "timeout", "catalog")
}

func TestCheckClientCancelsWhileQueued(t *testing.T) {
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 4, 0)}, policy: DefaultPolicy()})
	held := hold(t, e.reg, "catalog", 1)
	lim := e.reg.Get("catalog")

	ctx, cancel := context.WithCancel(context.Background())
	ch := checkAsync(ctx, e.client, forKey("catalog"))
	testkit.Eventually(t, "queued", func() bool { return lim.Snapshot().QueuedTotal() == 1 })
	cancel()
	r := recvResult(t, ch)
	if status.Code(r.err) != codes.Canceled {
		t.Fatalf("Check = %v, %v; want Canceled", r.resp, r.err)
	}
	testkit.Eventually(t, "waiter gone", func() bool { s := lim.Snapshot(); return s.QueuedTotal() == 0 && s.Cancelled == 1 })
	if s := lim.Snapshot(); s.InUse != 1 || s.Admitted[bulkhead.Normal] != 0 {
		t.Fatalf("after cancel: %+v", s)
	}
	held[0].Release()
	if s := lim.Snapshot(); s.InUse != 0 {
		t.Fatalf("in use %d after the only holder released", s.InUse)
	}
	if n := e.ledger.Len(); n != 0 {
		t.Fatalf("ledger holds %d leases", n)
	}
}

// cancelAfterGrant ends the Check's context right after its permit is
// registered.
func cancelAfterGrant(cancel context.CancelFunc) admission.MemoryOption {
	return admission.WithRegistered(cancel)
}

func TestCheckCancelledAfterGrantReleases(t *testing.T) {
	for _, name := range []string{"cancel", "cancel with a deadline"} {
		t.Run(name, func(t *testing.T) {
			var ctx context.Context
			var cancel context.CancelFunc
			if name == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
			}
			defer cancel()
			e := newEnv(t, envConfig{
				bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)},
				policy:    DefaultPolicy(),
				memOpts:   []admission.MemoryOption{cancelAfterGrant(cancel)},
			})
			resp, err := e.srv.Check(ctx, forKey("catalog"))
			if status.Code(err) != codes.Canceled || resp != nil {
				t.Fatalf("Check = %v, %v; want a Canceled error", resp, err)
			}
			if got := e.obs.endedBy(permit.Cancel); got != 1 {
				t.Fatalf("leases ended by cancel: %d, want 1", got)
			}
			if s := snap(t, e.reg, "catalog"); s.InUse != 0 || s.Released != 1 {
				t.Fatalf("after cancel: %+v", s)
			}
			if e.ledger.Len() != 0 {
				t.Fatalf("ledger holds %d leases", e.ledger.Len())
			}
			if got := e.rec.count(e.rec.waited, "catalog"); got != 0 {
				t.Errorf("a cancelled Check recorded a wait")
			}
		})
	}
}

// A ledger that cannot register the permit: the permit goes back and the
// answer is a gRPC error ("cannot decide"), not a denial.
func TestCheckLedgerFull(t *testing.T) {
	e := newEnv(t, envConfig{
		bulkheads:  map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)},
		policy:     DefaultPolicy(),
		ledgerOpts: []permit.Option{permit.WithMaxLeases(1)},
	})
	resp, err := e.client.Check(context.Background(), forKey("catalog"))
	wantAdmitted(t, resp, err, "catalog")
	resp, err = e.client.Check(context.Background(), forKey("catalog"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Check with a full ledger = %v, %v; want ResourceExhausted", resp, err)
	}
	if s := snap(t, e.reg, "catalog"); s.InUse != 1 {
		t.Fatalf("in use = %d, want 1 (the unregistered permit given back)", s.InUse)
	}
}

func TestCheckEmptyRequest(t *testing.T) {
	for _, pol := range []UnmatchedPolicy{Deny, Allow, UseDefault} {
		p := DefaultPolicy()
		p.Unmatched, p.DefaultBulkhead = pol, "catalog"
		e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)}, policy: p})
		for _, req := range []*authv3.CheckRequest{nil, {}, {Attributes: &authv3.AttributeContext{}}} {
			resp, err := e.srv.Check(context.Background(), req)
			if err != nil || resp == nil {
				t.Fatalf("policy %d: Check(%v) = %v, %v", pol, req, resp, err)
			}
		}
		resp, err := e.client.Check(context.Background(), &authv3.CheckRequest{})
		switch pol {
		case Deny:
			wantDenial(t, resp, err, 503, "unknown_bulkhead", "")
		case Allow:
			if err != nil || resp.GetOkResponse() == nil {
				t.Fatalf("allow: %v, %v", resp, err)
			}
		case UseDefault:
			wantAdmitted(t, resp, err, "catalog")
		}
	}
}
