package permit

import (
	"testing"
	"time"
)

// FuzzRelease releases arbitrary strings, optionally spliced onto a real
// token, against a ledger with live leases. No input may panic, and an input
// may release a lease only if it is exactly that lease's token.
func FuzzRelease(f *testing.F) {
	seeds := []struct {
		s      string
		splice uint8
	}{
		{"", 0},
		{"AAAAAAAAAAAAAAAAAAAAAA", 0},
		{"not a token at all", 0},
		{"", 22},  // a real token, unchanged
		{"B", 21}, // a real token with its last character replaced
		{"=", 22}, // padded
		{"x", 1},  // short
		{"\xff", 5},
		{"AAAAAAAAAAAAAAAAAAAAAAAA", 0},
	}
	for _, s := range seeds {
		f.Add(s.s, s.splice)
	}
	f.Fuzz(func(t *testing.T, s string, splice uint8) {
		const leases = 3
		l, _ := newFakeLedger(WithShards(2))
		toks := make([]string, leases)
		permits := make([]*countingPermit, leases)
		for i := range toks {
			toks[i], permits[i] = grant(t, l, Grant{Bulkhead: "b", TTL: time.Second})
		}
		candidate := s
		if splice > 0 {
			// The first splice%23 characters of a real token, then s.
			tok := toks[int(splice)%leases]
			candidate = tok[:int(splice)%(TokenLen+1)] + s
		}
		lease, r := l.Release(candidate, AccessLog)
		named := -1
		for i, tok := range toks {
			if tok == candidate {
				named = i
			}
		}
		if (r == Released) != (named >= 0) {
			t.Fatalf("Release(%q) = %v; names lease %d", candidate, r, named)
		}
		if r == Duplicate {
			t.Fatalf("Release(%q) = duplicate with nothing released before", candidate)
		}
		if r == Released && lease.Token != candidate {
			t.Fatalf("Release(%q) returned lease %q", candidate, lease.Token)
		}
		for i, p := range permits {
			want := 0
			if i == named {
				want = 1
			}
			if p.count() != want {
				t.Fatalf("Release(%q) released permit %d %d times, want %d", candidate, i, p.count(), want)
			}
		}
	})
}
