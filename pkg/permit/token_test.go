package permit

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/clock"
)

func TestTokensUnique(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	l, _ := newFakeLedger(WithMaxLeases(n))
	seen := make(map[string]struct{}, n)
	perShard := make([]int, len(l.shards))
	p := &countingPermit{}
	for range n {
		tok, err := l.Grant(p, Grant{Bulkhead: "b", TTL: time.Minute})
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		if _, dup := seen[tok]; dup {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = struct{}{}
		k, ok := parseToken(tok)
		if !ok {
			t.Fatalf("issued token %q does not parse", tok)
		}
		if k.text() != tok {
			t.Fatalf("token %q round-trips to %q", tok, k.text())
		}
		perShard[l.shardIndex(&k)]++
	}
	// Random keys spread evenly: each shard gets n/64 = 1562 +- a few
	// percent; a counter or a constant byte would not.
	want := n / len(l.shards)
	for i, c := range perShard {
		if c < want/2 || c > want*2 {
			t.Fatalf("shard %d got %d of %d tokens, want about %d", i, c, n, want)
		}
	}
}

func TestParseTokenMatchesStrictBase64(t *testing.T) {
	strict := base64.RawURLEncoding.Strict()
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=. "
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(s string) {
		t.Helper()
		k, ok := parseToken(s)
		want, err := strict.DecodeString(s)
		wantOK := err == nil && len(want) == keyLen && len(s) == TokenLen
		if ok != wantOK || (ok && !bytes.Equal(k[:], want)) {
			t.Fatalf("parseToken(%q) = %x, %v; strict base64 = %x, %v", s, k, ok, want, err)
		}
	}
	for range 20_000 {
		b := make([]byte, TokenLen)
		for i := range b {
			if rng.IntN(50) == 0 {
				b[i] = alphabet[62+rng.IntN(len(alphabet)-62)]
			} else {
				b[i] = alphabet[rng.IntN(64)]
			}
		}
		check(string(b))
	}
	var k key
	for i := range 256 {
		k[keyLen-1] = byte(i)
		tok := k.text()
		check(tok)
		for _, c := range []byte(alphabet[:64]) {
			check(tok[:TokenLen-1] + string(c))
		}
	}
}

// A tagged Memory's tokens end with the owner's tag, which TokenTag reads
// back as redis.sha1hex's first 8 digits of the owner's id; its tokens
// stay distinct and valid.
func TestTaggedTokens(t *testing.T) {
	l := NewMemory(clock.Real{})
	tag := TagOf("replica-1")
	if got, want := tag.String(), "c43fe03b"; got != want { // printf replica-1 | sha1sum
		t.Fatalf("TagOf(replica-1) = %s, want %s", got, want)
	}
	l.TagTokens(tag)
	seen := map[string]bool{}
	for range 100 {
		tok, err := l.Grant(&nopPermit{}, Grant{Bulkhead: "b", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !ValidToken(tok) || seen[tok] {
			t.Fatalf("token %q invalid or issued twice", tok)
		}
		seen[tok] = true
		if got := TokenTag(tok); got != tag.String() {
			t.Fatalf("TokenTag(%q) = %q, want %q", tok, got, tag)
		}
	}
	if got := TokenTag("not a token"); got != "" {
		t.Fatalf("TokenTag of a malformed token = %q, want empty", got)
	}
}
