package authz

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/testkit"
)

func TestCheckAdmits(t *testing.T) {
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(2, 0, 0)}, policy: DefaultPolicy()})
	ctx := context.Background()

	resp, err := e.client.Check(ctx, forKey("catalog"))
	token := wantAdmitted(t, resp, err, "catalog")
	if got := snap(t, e.reg, "catalog").InUse; got != 1 {
		t.Fatalf("in use = %d, want 1", got)
	}
	if got := e.ledger.Len(); got != 1 {
		t.Fatalf("ledger holds %d leases, want 1", got)
	}
	if got := e.rec.count(e.rec.waited, "catalog"); got != 1 {
		t.Fatalf("Waited(catalog) recorded %d times, want 1", got)
	}

	lease, res := e.ledger.Release(token, permit.AccessLog)
	if res != permit.Released || lease.Bulkhead != "catalog" || lease.Priority != bulkhead.Normal {
		t.Fatalf("Release(token) = %+v, %v; want catalog/normal, released", lease, res)
	}
	if lease.Expires.Sub(lease.Acquired) != DefaultPolicy().DefaultLeaseTTL {
		t.Fatalf("lease TTL = %v, want the default", lease.Expires.Sub(lease.Acquired))
	}
	if got := snap(t, e.reg, "catalog").InUse; got != 0 {
		t.Fatalf("in use after release = %d, want 0", got)
	}
}

func TestCheckLeaseTTLPerBulkhead(t *testing.T) {
	pol := DefaultPolicy()
	pol.LeaseTTL = map[string]time.Duration{"catalog": 5 * time.Second, "auth": 0}
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0), "auth": settings(1, 0, 0)}, policy: pol})
	for key, want := range map[string]time.Duration{"catalog": 5 * time.Second, "auth": pol.DefaultLeaseTTL} {
		resp, err := e.client.Check(context.Background(), forKey(key))
		lease, _ := e.ledger.Release(wantAdmitted(t, resp, err, key), permit.AccessLog)
		if got := lease.Expires.Sub(lease.Acquired); got != want {
			t.Errorf("%s: lease TTL = %v, want %v", key, got, want)
		}
	}
}

func TestCheckRejections(t *testing.T) {
	t.Run("queue_full", func(t *testing.T) {
		for _, status := range []int{0, 429} {
			pol := DefaultPolicy()
			want := 503
			if status != 0 {
				pol.DenyStatus, want = status, status
			}
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)}, policy: pol})
			hold(t, e.reg, "catalog", 1)
			resp, err := e.client.Check(context.Background(), forKey("catalog"))
			d := wantDenial(t, resp, err, want, "queue_full", "catalog")
			if d.headers["retry-after"] != "1" {
				t.Errorf("retry-after = %q, want 1", d.headers["retry-after"])
			}
			if e.ledger.Len() != 0 {
				t.Errorf("a rejection left %d leases", e.ledger.Len())
			}
		}
	})

	t.Run("shed", func(t *testing.T) {
		pol := DefaultPolicy()
		pol.DenyStatus = 429
		pol.RetryAfter = 2500 * time.Millisecond
		e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 1, 0)}, policy: pol})
		held := hold(t, e.reg, "catalog", 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		low := checkAsync(ctx, e.client, checkReq(map[string]string{"bulkhead": "catalog", "priority": "best_effort"}, nil))
		testkit.Eventually(t, "best_effort queued", func() bool { return snap(t, e.reg, "catalog").Queued[bulkhead.BestEffort] == 1 })
		high := checkAsync(ctx, e.client, checkReq(map[string]string{"bulkhead": "catalog", "priority": "critical"}, nil))

		r := recvResult(t, low)
		d := wantDenial(t, r.resp, r.err, 429, "shed", "catalog")
		if d.headers["retry-after"] != "3" {
			t.Errorf("retry-after = %q, want 3", d.headers["retry-after"])
		}
		testkit.Eventually(t, "critical queued", func() bool { return snap(t, e.reg, "catalog").Queued[bulkhead.Critical] == 1 })
		held[0].Release()
		r = recvResult(t, high)
		token := wantAdmitted(t, r.resp, r.err, "catalog")
		if lease, _ := e.ledger.Release(token, permit.AccessLog); lease.Priority != bulkhead.Critical {
			t.Errorf("admitted as %v, want critical", lease.Priority)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		// max_wait ends the wait; a fake clock times it.
		fake := clock.NewFake(time.Now())
		e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 4, time.Second)}, policy: DefaultPolicy(), limiterClk: fake})
		hold(t, e.reg, "catalog", 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ch := checkAsync(ctx, e.client, forKey("catalog"))
		testkit.Eventually(t, "wait timer armed", func() bool { return fake.Timers() == 1 })
		fake.Advance(time.Second)
		r := recvResult(t, ch)
		wantDenial(t, r.resp, r.err, 503, "timeout", "catalog")
		if s := snap(t, e.reg, "catalog"); s.QueuedTotal() != 0 || s.InUse != 1 {
			t.Errorf("after timeout: queued %d, in use %d; want 0, 1", s.QueuedTotal(), s.InUse)
		}
	})

	t.Run("bulkhead removed while queued", func(t *testing.T) {
		e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 4, 0)}, policy: DefaultPolicy()})
		lim := e.reg.Get("catalog")
		p, err := lim.TryAcquire(bulkhead.Normal)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch := checkAsync(ctx, e.client, forKey("catalog"))
		testkit.Eventually(t, "queued", func() bool { return lim.Snapshot().QueuedTotal() == 1 })
		if _, err := e.reg.Apply(map[string]bulkhead.Settings{}); err != nil {
			t.Fatal(err)
		}
		r := recvResult(t, ch)
		wantDenial(t, r.resp, r.err, 503, "unknown_bulkhead", "catalog")
	})
}

func TestCheckUnmatched(t *testing.T) {
	tests := []struct {
		name     string
		policy   UnmatchedPolicy
		dflt     string
		key      *string // nil: no context_extensions at all
		wantKey  string  // admitted to this bulkhead; "" with wantOK: allowed without a permit
		wantOK   bool
		outcome  string
		wantEcho string
	}{
		{"deny missing", Deny, "", nil, "", false, "denied", ""},
		{"deny empty", Deny, "", ptr(""), "", false, "denied", ""},
		{"deny unknown", Deny, "", ptr("nope"), "", false, "denied", "nope"},
		{"deny unknown unsafe", Deny, "", ptr("no pe\r\nx: y"), "", false, "denied", ""},
		{"allow missing", Allow, "", nil, "", true, "allowed", ""},
		{"allow unknown", Allow, "", ptr("nope"), "", true, "allowed", ""},
		{"default missing", UseDefault, "catalog", nil, "catalog", true, "defaulted", ""},
		{"default unknown", UseDefault, "catalog", ptr("nope"), "catalog", true, "defaulted", ""},
		{"default not configured", UseDefault, "gone", ptr("nope"), "", false, "denied", "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := DefaultPolicy()
			pol.Unmatched, pol.DefaultBulkhead = tt.policy, tt.dflt
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)}, policy: pol})
			var ext map[string]string
			if tt.key != nil {
				ext = map[string]string{"bulkhead": *tt.key}
			}
			resp, err := e.client.Check(context.Background(), checkReq(ext, nil))
			switch {
			case !tt.wantOK:
				wantDenial(t, resp, err, 503, "unknown_bulkhead", tt.wantEcho)
			case tt.wantKey == "":
				if err != nil || resp.GetStatus().GetCode() != 0 || resp.GetOkResponse() == nil || resp.GetDynamicMetadata() != nil {
					t.Fatalf("Check = %v, %v; want OK without metadata", resp, err)
				}
			default:
				token := wantAdmitted(t, resp, err, tt.wantKey)
				if lease, res := e.ledger.Release(token, permit.AccessLog); res != permit.Released || lease.Bulkhead != tt.wantKey {
					t.Fatalf("lease %+v %v", lease, res)
				}
			}
			if got := e.rec.count(e.rec.unmatched, tt.outcome); got != 1 {
				t.Errorf("Unmatched(%q) recorded %d times, want 1 (all: %v)", tt.outcome, got, e.rec.unmatched)
			}
			if tt.wantKey == "" && snap(t, e.reg, "catalog").Admitted != [3]uint64{} {
				t.Errorf("a permit was taken: %+v", snap(t, e.reg, "catalog"))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestCheckPriority(t *testing.T) {
	const hdr = "x-bulkhead-priority"
	const trusted, untrusted = "10.1.2.3", "192.0.2.9"
	tests := []struct {
		name      string
		header    string // policy's PriorityHeader
		dflt      bulkhead.Priority
		headers   map[string]string
		ext       string // context_extensions["priority"], "-" for none
		source    string // downstream address; "" for none
		want      bulkhead.Priority
		invalid   int
		untrusted int
	}{
		{"none", hdr, bulkhead.Normal, nil, "-", trusted, bulkhead.Normal, 0, 0},
		{"default best_effort", hdr, bulkhead.BestEffort, nil, "-", untrusted, bulkhead.BestEffort, 0, 0},
		{"header", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", trusted, bulkhead.Critical, 0, 0},
		{"extension", hdr, bulkhead.Normal, nil, "best_effort", untrusted, bulkhead.BestEffort, 0, 0},
		{"header wins", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "best_effort", trusted, bulkhead.Critical, 0, 0},
		{"other header ignored", hdr, bulkhead.Normal, map[string]string{"x-priority": "critical"}, "-", trusted, bulkhead.Normal, 0, 0},
		{"invalid header", hdr, bulkhead.Normal, map[string]string{hdr: "urgent"}, "-", trusted, bulkhead.Normal, 1, 0},
		{"invalid header, valid extension", hdr, bulkhead.BestEffort, map[string]string{hdr: "urgent"}, "critical", trusted, bulkhead.Critical, 1, 0},
		{"invalid header and extension", hdr, bulkhead.BestEffort, map[string]string{hdr: "urgent"}, "high", trusted, bulkhead.BestEffort, 2, 0},
		{"empty header", hdr, bulkhead.Normal, map[string]string{hdr: ""}, "-", trusted, bulkhead.Normal, 1, 0},
		{"oversized header", hdr, bulkhead.Normal, map[string]string{hdr: strings.Repeat("critical", 1000)}, "-", trusted, bulkhead.Normal, 1, 0},
		{"invalid extension", hdr, bulkhead.Normal, nil, "CRITICAL", trusted, bulkhead.Normal, 1, 0},
		{"headers ignored", "", bulkhead.Normal, map[string]string{hdr: "critical", "": "critical"}, "best_effort", trusted, bulkhead.BestEffort, 0, 0},
		{"header name normalised", "X-Bulkhead-Priority", bulkhead.Normal, map[string]string{hdr: "critical"}, "-", trusted, bulkhead.Critical, 0, 0},
		{"trusted IPv4 in IPv6", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", "::ffff:10.9.9.9", bulkhead.Critical, 0, 0},
		{"trusted IPv6", hdr, bulkhead.BestEffort, map[string]string{hdr: "critical"}, "-", "fd00::7", bulkhead.Critical, 0, 0},

		// From an untrusted source the header may lower the class, never raise it.
		{"untrusted raise over the default", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", untrusted, bulkhead.Normal, 0, 1},
		{"untrusted raise over the route", hdr, bulkhead.Normal, map[string]string{hdr: "normal"}, "best_effort", untrusted, bulkhead.BestEffort, 0, 1},
		{"untrusted raise to the top", hdr, bulkhead.BestEffort, map[string]string{hdr: "critical"}, "-", untrusted, bulkhead.BestEffort, 0, 1},
		{"untrusted lower", hdr, bulkhead.Normal, map[string]string{hdr: "best_effort"}, "critical", untrusted, bulkhead.BestEffort, 0, 0},
		{"untrusted same class", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "critical", untrusted, bulkhead.Critical, 0, 0},
		{"no source is untrusted", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", "", bulkhead.Normal, 0, 1},
		{"unparsable source is untrusted", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", "10.1.2.3:80", bulkhead.Normal, 0, 1},
		{"pipe source is untrusted", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", "/run/envoy.sock", bulkhead.Normal, 0, 1},
		{"just outside the prefix", hdr, bulkhead.Normal, map[string]string{hdr: "critical"}, "-", "11.0.0.0", bulkhead.Normal, 0, 1},
		{"invalid route, untrusted raise", hdr, bulkhead.BestEffort, map[string]string{hdr: "normal"}, "urgent", untrusted, bulkhead.BestEffort, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := DefaultPolicy()
			pol.PriorityHeader, pol.DefaultPriority = tt.header, tt.dflt
			pol.TrustedPrioritySources = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
			e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)}, policy: pol})
			ext := map[string]string{"bulkhead": "catalog"}
			if tt.ext != "-" {
				ext["priority"] = tt.ext
			}
			req := checkReq(ext, tt.headers)
			if tt.source != "" {
				req = fromSource(req, tt.source)
			}
			resp, err := e.client.Check(context.Background(), req)
			token := wantAdmitted(t, resp, err, "catalog")
			if got := snap(t, e.reg, "catalog").Admitted[tt.want]; got != 1 {
				t.Errorf("admitted as %v: %d, want 1", tt.want, got)
			}
			if lease, _ := e.ledger.Release(token, permit.AccessLog); lease.Priority != tt.want {
				t.Errorf("lease priority %v, want %v", lease.Priority, tt.want)
			}
			if got := e.rec.count(e.rec.invalid, "catalog"); got != tt.invalid {
				t.Errorf("InvalidPriority(catalog) recorded %d times, want %d", got, tt.invalid)
			}
			if got := e.rec.count(e.rec.untrusted, "catalog"); got != tt.untrusted {
				t.Errorf("UntrustedPriority(catalog) recorded %d times, want %d", got, tt.untrusted)
			}
		})
	}
}

// With no trusted sources (the default) nobody raises a class by header,
// and the trust list is swapped with the policy.
func TestCheckPriorityTrustDefault(t *testing.T) {
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(4, 0, 0)}, policy: DefaultPolicy()})
	check := func(source string) bulkhead.Priority {
		t.Helper()
		req := fromSource(checkReq(map[string]string{"bulkhead": "catalog"}, map[string]string{"x-bulkhead-priority": "critical"}), source)
		resp, err := e.client.Check(context.Background(), req)
		lease, _ := e.ledger.Release(wantAdmitted(t, resp, err, "catalog"), permit.AccessLog)
		return lease.Priority
	}
	if p := check("127.0.0.1"); p != bulkhead.Normal {
		t.Errorf("loopback raised itself to %v with no trusted sources", p)
	}
	pol := DefaultPolicy()
	pol.TrustedPrioritySources = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	e.srv.SetPolicy(pol)
	if p := check("127.0.0.1"); p != bulkhead.Critical {
		t.Errorf("trusted loopback admitted as %v, want critical", p)
	}
	if p := check("10.0.0.1"); p != bulkhead.Normal {
		t.Errorf("untrusted source admitted as %v, want normal", p)
	}
	if got := e.rec.count(e.rec.untrusted, "catalog"); got != 2 {
		t.Errorf("UntrustedPriority(catalog) = %d, want 2", got)
	}
}

func TestSetPolicy(t *testing.T) {
	e := newEnv(t, envConfig{bulkheads: map[string]bulkhead.Settings{"catalog": settings(1, 0, 0)}, policy: DefaultPolicy()})
	resp, err := e.client.Check(context.Background(), forKey("nope"))
	wantDenial(t, resp, err, 503, "unknown_bulkhead", "nope")

	pol := DefaultPolicy()
	pol.DenyStatus = 429
	e.srv.SetPolicy(pol)
	resp, err = e.client.Check(context.Background(), forKey("nope"))
	wantDenial(t, resp, err, 429, "unknown_bulkhead", "nope")

	pol.Unmatched = Allow
	e.srv.SetPolicy(pol)
	resp, err = e.client.Check(context.Background(), forKey("nope"))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("after SetPolicy(Allow): %v, %v", resp, err)
	}
}
