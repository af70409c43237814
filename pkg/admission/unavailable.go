package admission

import (
	"errors"
	"fmt"
)

// UnavailablePolicy is what a replica does with a Check while a shared
// backend cannot reach its store; it is the configuration's
// ledger.on_unavailable. The zero value is FailClosed.
type UnavailablePolicy uint8

// The policies.
const (
	// FailClosed rejects the Check, reason ledger_unavailable.
	FailClosed UnavailablePolicy = iota
	// FailOpen admits it without a permit.
	FailOpen
	// LocalShare admits it within this replica's share of the limit (the
	// limit divided by the replicas the others hold its share back by,
	// rounded down: redisledger.Ledger.Share), once the replica has been
	// cut off long enough for the replicas that still reach Redis to hold
	// its share back (before that, and past ledger.local_share_for, it
	// rejects as FailClosed), so that the replicas' sum stays within the
	// limit.
	LocalShare
)

var unavailableNames = [...]string{"fail_closed", "fail_open", "local_share"}

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
	return FailClosed, fmt.Errorf("%w: %q (want fail_closed, fail_open or local_share)", ErrUnknownUnavailablePolicy, s)
}
