package admission

import (
	"errors"
	"fmt"
)

// State is a shared backend's availability as this replica sees it: the
// one signal every part of the daemon that depends on the shared store
// (the gate on the data plane, replication, the admin API, the metrics)
// reads. The memory backend is always Strict.
type State int32

// The states. Strict: every admission is decided by the backend's store.
// Unavailable: the store failed a call that had the backend's whole
// timeout; Checks get the on_unavailable policy (beyond what a capacity
// lease still covers), and the store is probed until it answers, when
// Strict resumes.
const (
	Strict State = iota
	Unavailable
)

// States lists every state.
func States() []State { return []State{Strict, Unavailable} }

var stateNames = [...]string{"strict", "unavailable"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Global is a bulkhead's state in a shared store, every replica's together.
type Global struct {
	InUse int
	// Queued is indexed by bulkhead.Priority.
	Queued [3]int
	// Recovering: the bulkhead's recovery window holds admissions (the
	// store had no state for it, or lost it).
	Recovering bool
}

// Op names a call a shared backend makes to its store; its value is a
// metric label.
type Op string

// The operations.
const (
	OpAcquire  Op = "acquire"
	OpRelease  Op = "release"
	OpRenew    Op = "renew"
	OpLeave    Op = "leave"
	OpState    Op = "state"
	OpReplicas Op = "replicas"
	OpReopen   Op = "reopen"
	// OpLease is a capacity lease's grant, renewal or return.
	OpLease Op = "lease"
)

// Ops lists every operation.
func Ops() []Op {
	return []Op{OpAcquire, OpRelease, OpRenew, OpLeave, OpState, OpReplicas, OpReopen, OpLease}
}

// ErrCallerDeadline is wrapped by the error of a call to the store that its
// caller cut short, not the store: a Check's own deadline came before the
// backend's timeout (or the caller's context ended). It says nothing of the
// store, so it never makes the backend Unavailable, and the metrics count
// such a call apart from the store's timeouts.
var ErrCallerDeadline = errors.New("the caller's deadline came before Redis answered")
