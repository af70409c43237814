package permit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestGrantRelease(t *testing.T) {
	rec := newRecorder(8)
	l, clk := newFakeLedger(WithObserver(rec))
	g := Grant{Bulkhead: "catalog", Priority: bulkhead.Critical, TTL: time.Minute, Node: "envoy-1"}
	tok, p := grant(t, l, g)
	if len(tok) != TokenLen {
		t.Fatalf("token %q has length %d, want %d", tok, len(tok), TokenLen)
	}
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1", l.Len())
	}
	clk.Advance(3 * time.Second)

	steps := []struct {
		name    string
		token   string
		want    Result
		permits int
	}{
		{"first release", tok, Released, 1},
		{"second release", tok, Duplicate, 1},
		{"third release", tok, Duplicate, 1},
		{"never issued", "AAAAAAAAAAAAAAAAAAAAAA", Unknown, 1},
		{"garbage", "not a token", Unknown, 1},
	}
	for _, st := range steps {
		lease, got := l.Release(st.token, AccessLog)
		if got != st.want {
			t.Fatalf("%s: result %v, want %v", st.name, got, st.want)
		}
		if p.count() != st.permits {
			t.Fatalf("%s: permit released %d times, want %d", st.name, p.count(), st.permits)
		}
		if got != Released && lease != (Lease{}) {
			t.Fatalf("%s: lease %+v, want zero", st.name, lease)
		}
		if got == Released {
			want := Lease{Token: tok, Bulkhead: "catalog", Node: "envoy-1", Priority: bulkhead.Critical,
				Acquired: t0, Expires: t0.Add(time.Minute)}
			if lease != want {
				t.Fatalf("%s: lease %+v, want %+v", st.name, lease, want)
			}
		}
	}
	if l.Len() != 0 {
		t.Fatalf("Len = %d, want 0", l.Len())
	}
	ends := rec.endings()
	if len(ends) != 1 || ends[0].src != AccessLog || !ends[0].at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("Ended calls %+v, want one access_log at t0+3s", ends)
	}
	if d, u := rec.ignoredCount(Duplicate), rec.ignoredCount(Unknown); d != 2 || u != 2 {
		t.Fatalf("Ignored duplicate=%d unknown=%d, want 2 and 2", d, u)
	}
}

func TestReleaseMalformedTokens(t *testing.T) {
	l, _ := newFakeLedger()
	tok, p := grant(t, l, Grant{Bulkhead: "b", TTL: time.Minute})
	last := tok[len(tok)-1]
	var sibling string // same decoded top bits, non-zero padding bits
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") {
		v, _ := sextet(c)
		w, _ := sextet(last)
		if c != last && v>>4 == w>>4 {
			sibling = tok[:len(tok)-1] + string(c)
			break
		}
	}
	cases := []struct{ name, token string }{
		{"empty", ""},
		{"short", tok[:TokenLen-1]},
		{"long", tok + "A"},
		{"padded", tok + "=="},
		{"std alphabet plus", "+" + tok[1:]},
		{"std alphabet slash", tok[:5] + "/" + tok[6:]},
		{"space", " " + tok[1:]},
		{"nul", "\x00" + tok[1:]},
		{"non-ascii", "é" + tok[2:]},
		{"non-canonical trailing bits", sibling},
		{"upper-cased", strings.ToUpper(tok)},
		{"all zero", "AAAAAAAAAAAAAAAAAAAAAA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.token == tok {
				t.Skip("mutation produced the real token")
			}
			if _, r := l.Release(tc.token, AccessLog); r != Unknown {
				t.Fatalf("Release(%q) = %v, want unknown", tc.token, r)
			}
			if p.count() != 0 || l.Len() != 1 {
				t.Fatalf("a malformed token touched the lease")
			}
		})
	}
}

func TestGrantErrors(t *testing.T) {
	l, _ := newFakeLedger(WithMaxLeases(2))
	ok := Grant{Bulkhead: "b", TTL: time.Second}
	cases := []struct {
		name string
		p    Releaser
		g    Grant
		want error
	}{
		{"nil permit", nil, ok, ErrInvalidGrant},
		{"zero ttl", &countingPermit{}, Grant{Bulkhead: "b"}, ErrInvalidGrant},
		{"negative ttl", &countingPermit{}, Grant{Bulkhead: "b", TTL: -time.Second}, ErrInvalidGrant},
		{"first", &countingPermit{}, ok, nil},
		{"second", &countingPermit{}, ok, nil},
		{"over the cap", &countingPermit{}, ok, ErrFull},
	}
	for _, tc := range cases {
		tok, err := l.Grant(tc.p, tc.g)
		if !errors.Is(err, tc.want) || (err == nil) != (tok != "") {
			t.Fatalf("%s: Grant = %q, %v; want error %v", tc.name, tok, err, tc.want)
		}
	}
	if l.Len() != 2 {
		t.Fatalf("Len = %d, want 2", l.Len())
	}
	if n := l.Sweep(); n != 0 {
		t.Fatalf("Sweep ended %d leases before expiry", n)
	}
	if n := l.Close(Shutdown); n != 2 {
		t.Fatalf("Close ended %d, want 2", n)
	}
	if _, err := l.Grant(&countingPermit{}, ok); !errors.Is(err, ErrClosed) {
		t.Fatalf("Grant after Close: %v, want ErrClosed", err)
	}
	if n := l.Close(Shutdown); n != 0 {
		t.Fatalf("second Close ended %d, want 0", n)
	}
}

func TestCapFreesOnRelease(t *testing.T) {
	l, _ := newFakeLedger(WithMaxLeases(1))
	g := Grant{Bulkhead: "b", TTL: time.Second}
	tok, _ := grant(t, l, g)
	if _, err := l.Grant(&countingPermit{}, g); !errors.Is(err, ErrFull) {
		t.Fatalf("Grant at cap: %v, want ErrFull", err)
	}
	l.Release(tok, Cancel)
	grant(t, l, g)
}

func TestTombstonesDegradeToUnknown(t *testing.T) {
	cases := []struct {
		name       string
		tombstones int
		want       []Result // second release of tokens 0..3, oldest first
	}{
		{"none", 0, []Result{Unknown, Unknown, Unknown, Unknown}},
		{"two", 2, []Result{Unknown, Unknown, Duplicate, Duplicate}},
		{"plenty", 100, []Result{Duplicate, Duplicate, Duplicate, Duplicate}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newFakeLedger(WithShards(1), WithTombstones(tc.tombstones))
			var toks []string
			for range tc.want {
				tok, _ := grant(t, l, Grant{Bulkhead: "b", TTL: time.Second})
				toks = append(toks, tok)
			}
			for _, tok := range toks {
				if _, r := l.Release(tok, AccessLog); r != Released {
					t.Fatalf("first release: %v", r)
				}
			}
			for i, tok := range toks {
				if _, r := l.Release(tok, AccessLog); r != tc.want[i] {
					t.Fatalf("token %d: %v, want %v", i, r, tc.want[i])
				}
			}
		})
	}
}

func TestOptions(t *testing.T) {
	cases := []struct {
		name   string
		opts   []Option
		shards int
	}{
		{"default", nil, DefaultShards},
		{"one", []Option{WithShards(1)}, 1},
		{"rounded up", []Option{WithShards(5)}, 8},
		{"zero keeps default", []Option{WithShards(0)}, DefaultShards},
		{"capped", []Option{WithShards(1 << 20)}, maxShards},
	}
	for _, tc := range cases {
		l, _ := newFakeLedger(tc.opts...)
		if len(l.shards) != tc.shards || l.mask != uint64(tc.shards-1) {
			t.Errorf("%s: %d shards (mask %x), want %d", tc.name, len(l.shards), l.mask, tc.shards)
		}
	}
	l, _ := newFakeLedger(WithMaxLeases(0), WithSweepInterval(-1), WithTombstones(-1), WithObserver(nil))
	if l.max != DefaultMaxLeases || l.interval != DefaultSweepInterval || l.shards[0].tomb.gen != DefaultTombstones/2 {
		t.Errorf("out-of-range options changed defaults: max %d interval %v tombstones %d",
			l.max, l.interval, l.shards[0].tomb.gen)
	}
}

func TestNames(t *testing.T) {
	cases := []struct{ got, want string }{
		{AccessLog.String(), "access_log"},
		{TTL.String(), "ttl"},
		{Cancel.String(), "cancel"},
		{Shutdown.String(), "shutdown"},
		{Source(9).String(), "source(9)"},
		{Released.String(), "released"},
		{Duplicate.String(), "duplicate"},
		{Unknown.String(), "unknown"},
		{Late.String(), "late"},
		{Unavailable.String(), "unavailable"},
		{Result(17).String(), "result(17)"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if len(Sources()) != numSources {
		t.Errorf("Sources() has %d, want %d", len(Sources()), numSources)
	}
}
