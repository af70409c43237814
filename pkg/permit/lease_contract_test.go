package permit_test

// The lease store's contract (Grant, Adopt, Release, Renew, Sweep, Holders,
// Close), on a clock driven by hand. The admission contract above it,
// which every backend keeps, is package admission/admissiontest.

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

// start is the fake clock's start in every test.
var start = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func TestMemoryLeaseContract(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, *permit.Memory, *clock.Fake)
	}{
		{"ReleaseOnce", releaseOnce},
		{"UnknownTokens", unknownTokens},
		{"ExpiryReleasesOnce", expiryReleasesOnce},
		{"RenewKeepsAlive", renewKeepsAlive},
		{"RenewNeverShortens", renewNeverShortens},
		{"AdoptUnknown", adoptUnknown},
		{"AdoptAfterExpiry", adoptAfterExpiry},
		{"AdoptRefused", adoptRefused},
		{"Holders", holders},
		{"Close", closeEndsAll},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(start)
			l := permit.NewMemory(clk)
			t.Cleanup(func() { l.Close(permit.Shutdown) })
			tc.fn(t, l, clk)
		})
	}
}

// countingPermit counts its releases; a ledger must release each permit it
// took exactly once.
type countingPermit struct{ n atomic.Int32 }

// Release implements permit.Releaser.
func (p *countingPermit) Release() bool { return p.n.Add(1) == 1 }

// releases is how many times the permit was released.
func (p *countingPermit) releases() int { return int(p.n.Load()) }

func grant(t *testing.T, l *permit.Memory, bh string, ttl time.Duration) (*countingPermit, string) {
	t.Helper()
	p := new(countingPermit)
	tok, err := l.Grant(p, permit.Grant{Bulkhead: bh, Priority: bulkhead.Normal, TTL: ttl, Node: "envoy-1"})
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	return p, tok
}

func wantReleases(t *testing.T, p *countingPermit, n int) {
	t.Helper()
	if got := p.releases(); got != n {
		t.Fatalf("permit released %d times, want %d", got, n)
	}
}

func releaseOnce(t *testing.T, l *permit.Memory, _ *clock.Fake) {
	p, tok := grant(t, l, "catalog", time.Minute)
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
	lease, r := l.Release(tok, permit.AccessLog)
	if r != permit.Released || lease.Token != tok || lease.Bulkhead != "catalog" || lease.Node != "envoy-1" || lease.Adopted {
		t.Fatalf("Release = %+v, %v", lease, r)
	}
	wantReleases(t, p, 1)
	if _, r := l.Release(tok, permit.AccessLog); r != permit.Duplicate {
		t.Fatalf("second Release = %v, want duplicate", r)
	}
	if _, r := l.Renew(tok, time.Minute); r != permit.Duplicate {
		t.Fatalf("Renew after release = %v, want duplicate", r)
	}
	wantReleases(t, p, 1)
	if l.Len() != 0 {
		t.Fatalf("Len = %d, want 0", l.Len())
	}
}

func unknownTokens(t *testing.T, l *permit.Memory, _ *clock.Fake) {
	for _, tok := range []string{"", "x", "AAAAAAAAAAAAAAAAAAAAAA", "!!!!!!!!!!!!!!!!!!!!!!", "AAAAAAAAAAAAAAAAAAAAAAA"} {
		if _, r := l.Release(tok, permit.AccessLog); r != permit.Unknown {
			t.Errorf("Release(%q) = %v, want unknown", tok, r)
		}
		if _, r := l.Renew(tok, time.Second); r != permit.Unknown {
			t.Errorf("Renew(%q) = %v, want unknown", tok, r)
		}
	}
}

func expiryReleasesOnce(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	p, tok := grant(t, l, "catalog", 3*time.Second)
	clk.Advance(2999 * time.Millisecond)
	if n := l.Sweep(); n != 0 {
		t.Fatalf("Sweep before expiry ended %d", n)
	}
	clk.Advance(time.Millisecond)
	if n := l.Sweep(); n != 1 {
		t.Fatalf("Sweep at expiry ended %d, want 1", n)
	}
	wantReleases(t, p, 1)
	if _, r := l.Release(tok, permit.AccessLog); r != permit.Expired {
		t.Fatalf("Release after expiry = %v, want expired", r)
	}
	if _, r := l.Renew(tok, time.Second); r != permit.Expired {
		t.Fatalf("Renew after expiry = %v, want expired", r)
	}
	wantReleases(t, p, 1)
}

func renewKeepsAlive(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	p, tok := grant(t, l, "catalog", 3*time.Second)
	// Renewed every second for a minute: never expires.
	for range 60 {
		clk.Advance(time.Second)
		lease, r := l.Renew(tok, 3*time.Second)
		if r != permit.Renewed || !lease.Renewed.Equal(clk.Now()) || !lease.Expires.Equal(clk.Now().Add(3*time.Second)) {
			t.Fatalf("Renew = %+v, %v", lease, r)
		}
		if n := l.Sweep(); n != 0 {
			t.Fatalf("renewed lease expired at %v", clk.Now().Sub(start))
		}
	}
	wantReleases(t, p, 0)
	clk.Advance(3 * time.Second)
	if n := l.Sweep(); n != 1 {
		t.Fatalf("Sweep after renewals stopped ended %d, want 1", n)
	}
	wantReleases(t, p, 1)
}

func renewNeverShortens(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	_, tok := grant(t, l, "catalog", time.Minute)
	clk.Advance(time.Second)
	lease, r := l.Renew(tok, 3*time.Second)
	if r != permit.Renewed || !lease.Expires.Equal(start.Add(time.Minute)) {
		t.Fatalf("Renew = %+v, %v: want the minute lease kept", lease, r)
	}
}

func adoptUnknown(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	// A token another process granted: valid, never seen here.
	other, tok := grant(t, l, "catalog", time.Minute)
	if _, r := l.Release(tok, permit.AccessLog); r != permit.Released {
		t.Fatal(r)
	}
	wantReleases(t, other, 1)
	tok2 := anotherToken(t, l)
	p := new(countingPermit)
	lease, err := l.Adopt(p, tok2, permit.Grant{Bulkhead: "catalog", TTL: 3 * time.Second})
	if err != nil || !lease.Adopted || lease.Token != tok2 || !lease.Acquired.Equal(clk.Now()) {
		t.Fatalf("Adopt = %+v, %v", lease, err)
	}
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
	if _, r := l.Renew(tok2, 3*time.Second); r != permit.Renewed {
		t.Fatalf("Renew of adopted = %v", r)
	}
	if lease, r := l.Release(tok2, permit.AccessLog); r != permit.Released || !lease.Adopted {
		t.Fatalf("Release of adopted = %+v, %v", lease, r)
	}
	wantReleases(t, p, 1)
}

// anotherToken returns a valid token that l never issued, by granting
// and releasing in a scratch ledger-independent way: a fresh grant's token
// with its first character changed within the alphabet.
func anotherToken(t *testing.T, l *permit.Memory) string {
	t.Helper()
	p, tok := grant(t, l, "scratch", time.Minute)
	l.Release(tok, permit.Shutdown)
	wantReleases(t, p, 1)
	b := []byte(tok)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func adoptAfterExpiry(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	p, tok := grant(t, l, "catalog", 3*time.Second)
	clk.Advance(3 * time.Second)
	l.Sweep()
	wantReleases(t, p, 1)
	// The request is still running: its next periodic entry adopts it.
	q := new(countingPermit)
	if _, err := l.Adopt(q, tok, permit.Grant{Bulkhead: "catalog", TTL: 3 * time.Second}); err != nil {
		t.Fatalf("Adopt after expiry: %v", err)
	}
	if _, r := l.Release(tok, permit.AccessLog); r != permit.Released {
		t.Fatalf("Release = %v", r)
	}
	wantReleases(t, q, 1)
	wantReleases(t, p, 1)
}

func adoptRefused(t *testing.T, l *permit.Memory, _ *clock.Fake) {
	p, tok := grant(t, l, "catalog", time.Minute)
	q := new(countingPermit)
	if _, err := l.Adopt(q, tok, permit.Grant{Bulkhead: "catalog", TTL: time.Second}); !errors.Is(err, permit.ErrLive) {
		t.Fatalf("Adopt of a live token: %v, want ErrLive", err)
	}
	if _, err := l.Adopt(q, "not-a-token", permit.Grant{Bulkhead: "catalog", TTL: time.Second}); !errors.Is(err, permit.ErrInvalidToken) {
		t.Fatalf("Adopt of a malformed token: %v, want ErrInvalidToken", err)
	}
	if _, err := l.Adopt(q, anotherToken(t, l), permit.Grant{Bulkhead: "catalog"}); !errors.Is(err, permit.ErrInvalidGrant) {
		t.Fatalf("Adopt without a TTL: %v, want ErrInvalidGrant", err)
	}
	wantReleases(t, q, 0)
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
	l.Release(tok, permit.AccessLog)
	wantReleases(t, p, 1)
}

func holders(t *testing.T, l *permit.Memory, clk *clock.Fake) {
	var toks []string
	for range 5 {
		_, tok := grant(t, l, "catalog", time.Minute)
		toks = append(toks, tok)
		clk.Advance(time.Second)
	}
	grant(t, l, "orders", time.Minute)
	got, total := l.Holders("catalog", 3)
	if total != 5 || len(got) != 3 {
		t.Fatalf("Holders = %d leases of %d, want 3 of 5", len(got), total)
	}
	for i, lease := range got {
		if lease.Token != toks[i] {
			t.Fatalf("holder %d is %s, want the %d-th oldest %s", i, lease.Token, i, toks[i])
		}
	}
	if got, total := l.Holders("catalog", 0); got != nil || total != 5 {
		t.Fatalf("Holders(0) = %v, %d", got, total)
	}
	if got, total := l.Holders("nothing", 10); len(got) != 0 || total != 0 {
		t.Fatalf("Holders of an empty bulkhead = %v, %d", got, total)
	}
	oldest := l.Oldest()
	if !oldest["catalog"].Equal(start) || !oldest["orders"].Equal(start.Add(5*time.Second)) || len(oldest) != 2 {
		t.Fatalf("Oldest = %v", oldest)
	}
}

func closeEndsAll(t *testing.T, l *permit.Memory, _ *clock.Fake) {
	p1, _ := grant(t, l, "catalog", time.Minute)
	p2, _ := grant(t, l, "orders", time.Minute)
	if n := l.Close(permit.Shutdown); n != 2 {
		t.Fatalf("Close ended %d, want 2", n)
	}
	wantReleases(t, p1, 1)
	wantReleases(t, p2, 1)
	if _, err := l.Grant(new(countingPermit), permit.Grant{Bulkhead: "catalog", TTL: time.Minute}); !errors.Is(err, permit.ErrClosed) {
		t.Fatalf("Grant after Close: %v, want ErrClosed", err)
	}
	if l.Len() != 0 {
		t.Fatalf("Len = %d after Close", l.Len())
	}
}
