package admission

import (
	"errors"
	"fmt"
)

// UnavailablePolicy is what a replica does with a Check while a shared
// backend cannot reach its store, beyond what a capacity lease it holds
// still covers; it is the configuration's ledger.on_unavailable. The zero
// value is FailClosed. (The former local_share is read by package config
// as capacity leases with FailClosed.)
type UnavailablePolicy uint8

// The policies.
const (
	// FailClosed rejects the Check, reason ledger_unavailable.
	FailClosed UnavailablePolicy = iota
	// FailOpen admits it without a permit.
	FailOpen
)

var unavailableNames = [...]string{"fail_closed", "fail_open"}

func (p UnavailablePolicy) String() string {
	if int(p) < len(unavailableNames) {
		return unavailableNames[p]
	}
	return fmt.Sprintf("unavailable_policy(%d)", uint8(p))
}

// ErrUnknownUnavailablePolicy is wrapped by ParseUnavailablePolicy's error.
var ErrUnknownUnavailablePolicy = errors.New("unknown on_unavailable policy")

// ParseUnavailablePolicy maps a policy's name to it.
func ParseUnavailablePolicy(s string) (UnavailablePolicy, error) {
	for i, n := range unavailableNames {
		if s == n {
			return UnavailablePolicy(i), nil
		}
	}
	return FailClosed, fmt.Errorf("%w: %q (want fail_closed or fail_open)", ErrUnknownUnavailablePolicy, s)
}
