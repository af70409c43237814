package authz

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// FuzzCheck feeds random keys, priorities, header names and sources to
// Check: it never panics, every answer is OK with a token the ledger knows
// or a well-formed denial, no limiter exceeds its limit, and no request
// from an untrusted source gets a class above its route's (or the default).
func FuzzCheck(f *testing.F) {
	f.Add("catalog", "x-bulkhead-priority", "critical", "", uint8(0), uint8(3))
	f.Add("catalog", "x-bulkhead-priority", "urgent", "best_effort", uint8(4), uint8(2))
	f.Add("auth", "", "", "normal", uint8(1), uint8(1))
	f.Add("", "X-Prio", "critical", "critical", uint8(2), uint8(4))
	f.Add("nope", "x-bulkhead-priority", "best_effort", "\xff", uint8(5), uint8(0))
	f.Add("a\r\nb", "\x00", "\n", "priority", uint8(6), uint8(9))
	f.Add("catalog", "x-bulkhead-priority", "critical", "best_effort", uint8(16|32), uint8(1)) // trusted raise
	f.Add("catalog", "x-bulkhead-priority", "critical", "normal", uint8(16), uint8(1))         // untrusted raise
	f.Add("::ffff:127.0.0.1", "x-bulkhead-priority", "best_effort", "critical", uint8(48), uint8(2))
	limits := map[string]bulkhead.Settings{
		"catalog": {MaxConcurrent: 2, ReserveCritical: 0.5},
		"auth":    {MaxConcurrent: 1},
	}
	f.Fuzz(func(t *testing.T, key, hdrName, hdrVal, extPrio string, mode, n uint8) {
		reg := bulkhead.NewRegistry()
		if _, err := reg.Apply(limits); err != nil {
			t.Fatal(err)
		}
		ledger := permit.NewMemory(clock.Real{})
		pol := DefaultPolicy()
		pol.PriorityHeader = hdrName
		pol.Unmatched = UnmatchedPolicy(mode % 3)
		if pol.Unmatched == UseDefault {
			pol.DefaultBulkhead = "catalog"
		}
		pol.DenyStatus = 400 + int(n)%200
		ctx := context.Background()
		if mode&4 != 0 {
			// The deadline less the margin has passed: no waiting at all.
			pol.DeadlineMargin = 2 * time.Hour
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Hour)
			defer cancel()
		}
		trusted := mode&16 != 0 && mode&32 != 0
		if mode&16 != 0 {
			pol.TrustedPrioritySources = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		srv := New(reg, admission.NewMemory(reg, ledger, permit.Heartbeat{}), newFakeRecorder(), pol)
		ext := map[string]string{"bulkhead": key, "priority": extPrio, key: hdrVal}
		if mode&8 != 0 {
			delete(ext, "priority")
		}
		req := checkReq(ext, map[string]string{hdrName: hdrVal, "x-bulkhead-priority": extPrio})
		if mode&32 != 0 {
			req = fromSource(req, "127.0.0.1")
		} else {
			req = fromSource(req, key) // mostly not an address; 127.x when the fuzzer finds one
			trusted = mode&16 != 0 && (strings.HasPrefix(key, "127.") || strings.HasPrefix(key, "::ffff:127."))
		}
		base := pol.DefaultPriority
		if p, err := bulkhead.ParsePriority(ext["priority"]); err == nil {
			base = p
		}

		var tokens []string
		for range int(n%5) + 1 {
			resp, err := srv.Check(ctx, req)
			if err != nil {
				t.Fatalf("Check: gRPC error %v", err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				t.Fatalf("answer does not marshal: %v", err)
			}
			if resp.GetOkResponse() != nil {
				if resp.GetDynamicMetadata() == nil {
					if pol.Unmatched != Allow || reg.Get(key) != nil {
						t.Fatalf("OK without a permit for key %q under policy %d", key, pol.Unmatched)
					}
					continue
				}
				token, got, err := parseAdmitted(resp)
				if err != nil {
					t.Fatal(err)
				}
				if reg.Get(got) == nil || (got != key && (pol.Unmatched != UseDefault || got != pol.DefaultBulkhead)) {
					t.Fatalf("admitted to %q for key %q", got, key)
				}
				tokens = append(tokens, token)
			} else {
				d, err := parseDenial(resp)
				if err != nil {
					t.Fatalf("not a valid denial: %v", err)
				}
				if d.status != pol.DenyStatus {
					t.Fatalf("status %d, want %d", d.status, pol.DenyStatus)
				}
			}
			for _, s := range reg.Snapshots() {
				if s.InUse > s.Settings.MaxConcurrent {
					t.Fatalf("%s: %d in use, limit %d", s.Name, s.InUse, s.Settings.MaxConcurrent)
				}
			}
		}
		for _, tok := range tokens {
			lease, res := ledger.Release(tok, permit.AccessLog)
			if res != permit.Released {
				t.Fatalf("Release(%q) = %v: the ledger did not know an issued token", tok, res)
			}
			if lease.Priority < base && !trusted && lease.Bulkhead == key {
				t.Fatalf("admitted as %v above the route's %v from untrusted source", lease.Priority, base)
			}
		}
		for _, s := range reg.Snapshots() {
			if s.InUse != 0 || s.QueuedTotal() != 0 {
				t.Fatalf("%s after releasing everything: %+v", s.Name, s)
			}
		}
		if ledger.Len() != 0 {
			t.Fatalf("ledger holds %d leases", ledger.Len())
		}
	})
}
