package control

import (
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

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
