package control

import (
	"errors"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// ErrNotFound means that no bulkhead has that name.
var ErrNotFound = errors.New("no such bulkhead")

// Status is one bulkhead as the admin API shows it.
type Status struct {
	// Snapshot holds the effective settings, state and counters.
	Snapshot bulkhead.Snapshot
	LeaseTTL time.Duration
	// FileSettings are what the configuration file says.
	FileSettings bulkhead.Settings
	// Override is the admin change in force, or nil when the file's
	// settings are.
	Override *Override
	// Tenants is the number of live tenant sub-bulkheads.
	Tenants int
	// Outcomes is nil when the controller does not track outcomes.
	Outcomes *Outcomes
}

// Outcomes count how admitted requests ended (from the access log).
type Outcomes struct {
	Success, Failure, Aborted uint64
}

// Override is an admin change that overrides the file for one bulkhead.
type Override struct {
	Settings bulkhead.Settings
	Actor    string
	At       time.Time
}

// Patch changes some settings of a bulkhead; nil fields keep their value.
type Patch struct {
	MaxConcurrent   *int
	MaxQueue        *int
	MaxWait         *time.Duration
	ReserveCritical *float64
	ReserveNormal   *float64
}

// Apply returns s with the patch applied.
func (p Patch) Apply(s bulkhead.Settings) bulkhead.Settings {
	if p.MaxConcurrent != nil {
		s.MaxConcurrent = *p.MaxConcurrent
	}
	if p.MaxQueue != nil {
		s.MaxQueue = *p.MaxQueue
	}
	if p.MaxWait != nil {
		s.MaxWait = *p.MaxWait
	}
	if p.ReserveCritical != nil {
		s.ReserveCritical = *p.ReserveCritical
	}
	if p.ReserveNormal != nil {
		s.ReserveNormal = *p.ReserveNormal
	}
	return s
}

// Empty reports whether the patch changes nothing.
func (p Patch) Empty() bool {
	return p.MaxConcurrent == nil && p.MaxQueue == nil && p.MaxWait == nil &&
		p.ReserveCritical == nil && p.ReserveNormal == nil
}
