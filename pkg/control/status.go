package control

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/breaker"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/config"
)

// Status is one bulkhead as the admin API shows it.
type Status struct {
	// Snapshot holds the effective settings, state and counters.
	Snapshot bulkhead.Snapshot
	LeaseTTL time.Duration
	// Kind is what the bulkhead counts: requests, or connections (its file
	// entry has a connections section).
	Kind config.Kind
	// FileSettings are what the configuration file says.
	FileSettings bulkhead.Settings
	// Override is the admin change in force, or nil when the file's
	// settings are.
	Override *Override
	// Tenants is the number of live tenant sub-bulkheads.
	Tenants int
	// Outcomes is nil when the controller does not track outcomes.
	Outcomes *Outcomes
	// Circuit is the bulkhead's circuit breaker, nil when it has none.
	Circuit *breaker.Snapshot
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
