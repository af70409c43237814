package authz

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

func TestEchoable(t *testing.T) {
	tests := []struct {
		key, want string
	}{
		{"catalog", "catalog"},
		{"", ""},
		{"Api-v1.orders_2", "Api-v1.orders_2"},
		{strings.Repeat("a", maxEchoedKey), strings.Repeat("a", maxEchoedKey)},
		{strings.Repeat("a", maxEchoedKey+1), ""},
		{"a b", ""},
		{"a\r\nset-cookie: x", ""},
		{"a\x00", ""},
		{"a/b", ""},
		{`a"b`, ""},
		{"a:b", ""},
		{"ünïcode", ""},
		{"\xff", ""},
	}
	for _, tt := range tests {
		if got := echoable(tt.key); got != tt.want {
			t.Errorf("echoable(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "1"},
		{-time.Second, "1"},
		{time.Nanosecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Nanosecond, "2"},
		{1500 * time.Millisecond, "2"},
		{2 * time.Second, "2"},
		{90 * time.Second, "90"},
	}
	for _, tt := range tests {
		p := Policy{Settings: Settings{RetryAfter: tt.d}}
		if got := p.retryAfterSeconds(); got != tt.want {
			t.Errorf("retry-after for %v = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestDeniedForEveryReason(t *testing.T) {
	pol := DefaultPolicy()
	pol.DenyStatus = 429
	for _, r := range bulkhead.Reasons() {
		for _, key := range []string{"catalog", "bad key\n", ""} {
			resp := denied(&pol, key, r)
			d, err := parseDenial(resp)
			if err != nil {
				t.Fatalf("%v/%q: %v", r, key, err)
			}
			if d.status != 429 || d.body.Reason != r.String() || d.body.Bulkhead != echoable(key) {
				t.Errorf("%v/%q: got %+v", r, key, d)
			}
			if _, err := proto.Marshal(resp); err != nil {
				t.Errorf("%v/%q: response does not marshal: %v", r, key, err)
			}
		}
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	if p.PriorityHeader != "x-bulkhead-priority" || p.DefaultPriority != bulkhead.Normal || p.Unmatched != Deny ||
		p.DenyStatus != 503 || p.DeadlineMargin != 25*time.Millisecond || p.RetryAfter != time.Second || p.DefaultLeaseTTL != time.Minute {
		t.Fatalf("DefaultPolicy() = %+v, not the documented defaults", p)
	}
}
