// Package clock abstracts time so that code which waits, expires leases or
// measures durations can be tested without sleeping.
//
// Real is the wall clock. Fake (in fake.go) is a manually advanced clock for
// tests. Both are safe for concurrent use.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time (with a monotonic reading for Real).
	Now() time.Time
	// NewTimer returns a timer that fires once, d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that callers use.
type Timer interface {
	// C is the channel on which the timer's single tick is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
