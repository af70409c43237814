package admin

import (
	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/control"
	"github.com/bulkhead-mesh/bulkhead/pkg/sizing"
)

// Controller owns the run-time state of the bulkheads; *control.Control
// satisfies it. Its methods must be safe for concurrent use.
type Controller interface {
	// List returns every bulkhead, sorted by name.
	List() []Status
	// Get returns one bulkhead, or an error wrapping ErrNotFound.
	Get(name string) (Status, error)
	// Update merges p into the bulkhead's effective settings and keeps the
	// result as an override of the file, logging actor, before and after.
	// Invalid merged settings wrap bulkhead.ErrInvalidSettings and change
	// nothing; an unknown name wraps ErrNotFound.
	Update(name string, p Patch, actor string) (Status, error)
	// Reset drops the override: the file's settings are in force again.
	Reset(name, actor string) (Status, error)
	// SetCircuit sets the operator mode of the bulkhead's circuit breaker,
	// logging actor; a bulkhead without one wraps ErrNoBreaker.
	SetCircuit(name string, m breaker.Mode, actor string) (Status, error)
	// Suggest recommends settings for bulkhead name, or every bulkhead when
	// name is "", sorted by name; p's zero fields take the defaults. An
	// unknown name wraps ErrNotFound, invalid p sizing.ErrInvalidParams.
	Suggest(name string, p sizing.Params) ([]Sized, error)
}

var _ Controller = (*control.Control)(nil)

// ErrNotFound is wrapped by Controller errors for an unknown bulkhead.
var ErrNotFound = control.ErrNotFound

// The types the admin API shows and takes are pkg/control's.
type (
	Status   = control.Status
	Override = control.Override
	Outcomes = control.Outcomes
	Patch    = control.Patch
	Sized    = control.Sized
)
