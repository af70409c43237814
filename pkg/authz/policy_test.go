package authz

import (
	"errors"
	"testing"
)

func TestUnmatchedPolicyNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		want UnmatchedPolicy
	}{{"deny", Deny}, {"allow", Allow}, {"default", UseDefault}} {
		if got, err := ParseUnmatchedPolicy(tt.name); err != nil || got != tt.want {
			t.Errorf("ParseUnmatchedPolicy(%q) = %v, %v; want %v", tt.name, got, err, tt.want)
		}
		if s := tt.want.String(); s != tt.name {
			t.Errorf("%d.String() = %q, want %q", tt.want, s, tt.name)
		}
	}
	for _, bad := range []string{"Deny", "", "usedefault"} {
		if got, err := ParseUnmatchedPolicy(bad); !errors.Is(err, ErrUnknownUnmatchedPolicy) || got != Deny {
			t.Errorf("ParseUnmatchedPolicy(%q) = %v, %v; want Deny, ErrUnknownUnmatchedPolicy", bad, got, err)
		}
	}
	if s := UnmatchedPolicy(9).String(); s != "unmatched_policy(9)" {
		t.Errorf("UnmatchedPolicy(9) = %q", s)
	}
}
