package permit

import (
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // a tag names an owner, it protects nothing: Redis's Lua computes the same with redis.sha1hex
	"encoding/base64"
	"encoding/hex"
)

const (
	// keyLen is the number of random bytes in a token.
	keyLen = 16
	// TokenLen is the length of a token: keyLen bytes in unpadded base64.
	TokenLen = 22
)

// key is a token's decoded form, the map key of live and remembered leases.
type key [keyLen]byte

// newKey fills k with random bits from crypto/rand.
func newKey(k *key) error {
	_, err := rand.Read(k[:])
	return err
}

// text returns the token for k: unpadded URL-safe base64.
func (k *key) text() string {
	var buf [TokenLen]byte
	base64.RawURLEncoding.Encode(buf[:], k[:])
	return string(buf[:])
}

// parseToken decodes a token. It accepts only the canonical encoding of
// keyLen bytes (exactly TokenLen characters of the URL-safe alphabet, unused
// trailing bits zero), so each key has exactly one token.
func parseToken(s string) (k key, ok bool) {
	if len(s) != TokenLen {
		return k, false
	}
	var acc uint32
	bits, j := 0, 0
	for i := 0; i < TokenLen; i++ {
		v, ok := sextet(s[i])
		if !ok {
			return k, false
		}
		acc = acc<<6 | uint32(v)
		bits += 6
		if bits >= 8 {
			bits -= 8
			k[j] = byte(acc >> bits)
			j++
			acc &= 1<<bits - 1
		}
	}
	// 22*6 = 132 bits carry 128: the 4 left over must be zero.
	return k, acc == 0
}

// sextet maps a character of the URL-safe base64 alphabet to its value.
func sextet(c byte) (byte, bool) {
	switch {
	case 'A' <= c && c <= 'Z':
		return c - 'A', true
	case 'a' <= c && c <= 'z':
		return c - 'a' + 26, true
	case '0' <= c && c <= '9':
		return c - '0' + 52, true
	case c == '-':
		return 62, true
	case c == '_':
		return 63, true
	}
	return 0, false
}

// NewToken returns a fresh token, as Grant issues them (for a ledger kept
// elsewhere that takes its tokens from here).
func NewToken() (string, error) {
	var k key
	if err := newKey(&k); err != nil {
		return "", err
	}
	return k.text(), nil
}

// ValidToken reports whether s is a token NewToken or Grant could have
// issued (the canonical encoding of 128 bits).
func ValidToken(s string) bool {
	_, ok := parseToken(s)
	return ok
}

// tagLen is the length of a Tag: the last bytes of a tagged token.
const tagLen = 4

// Tag names the owner of the tokens a Memory issues (TagTokens): the first
// tagLen bytes of the SHA-1 of the owner's id (TagOf). Two owners' tags
// collide with probability 2^-32 per pair.
type Tag [tagLen]byte

// TagOf is the Tag of the owner named id.
func TagOf(id string) Tag {
	sum := sha1.Sum([]byte(id)) //nolint:gosec // see the import
	return Tag(sum[:tagLen])
}

// String is the tag in lowercase hex (what redis.sha1hex's first 8 digits
// are).
func (t Tag) String() string { return hex.EncodeToString(t[:]) }

// TokenTag returns the last tagLen bytes of token, in lowercase hex: its
// owner's Tag when it was issued by a tagged Memory, random bits otherwise;
// "" for a malformed token.
func TokenTag(token string) string {
	k, ok := parseToken(token)
	if !ok {
		return ""
	}
	return hex.EncodeToString(k[keyLen-tagLen:])
}
