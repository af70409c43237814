package bulkhead

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Settings are the tunables of one bulkhead. The zero value is not valid;
// MaxConcurrent must be at least 1.
type Settings struct {
	// MaxConcurrent is the limit: permits in use never exceed it, except
	// permits granted before a shrink.
	MaxConcurrent int
	// MaxQueue bounds the number of waiters; 0 means fail fast.
	MaxQueue int
	// MaxWait bounds how long a waiter waits; 0 means as long as its
	// context allows.
	MaxWait time.Duration
	// ReserveCritical is the fraction of MaxConcurrent only Critical may use.
	ReserveCritical float64
	// ReserveNormal is a further fraction that BestEffort may not use.
	ReserveNormal float64
	// DryRun (the configuration's enforce: false) admits every request at
	// once and only counts, by reason, what the limiter would have rejected
	// had it enforced the settings above (Snapshot.WouldReject).
	DryRun bool
	// Queue orders waiters within a class: FIFO (the zero value) or CoDel,
	// with CoDelTarget and CoDelInterval (both positive, target below
	// interval; unused and zero with FIFO).
	Queue         QueueDiscipline
	CoDelTarget   time.Duration
	CoDelInterval time.Duration
}

// Ceiling returns how many permits may be in use for a request of class p to
// be admitted: Critical may fill the whole limit, Normal up to the limit less
// the critical reserve, BestEffort up to the limit less both reserves. A
// reserve of fraction f holds ceil(f*limit) permits, so a non-zero reserve
// always holds at least one.
func (s Settings) Ceiling(p Priority) int {
	switch p {
	case Critical:
		return s.MaxConcurrent
	case Normal:
		return s.MaxConcurrent - reserved(s.ReserveCritical, s.MaxConcurrent)
	default:
		return s.MaxConcurrent - reserved(s.ReserveCritical+s.ReserveNormal, s.MaxConcurrent)
	}
}

func reserved(frac float64, limit int) int {
	// The epsilon keeps 0.1*10 at 1, not 2, despite float rounding.
	return int(math.Ceil(frac*float64(limit) - 1e-9))
}

// Validate reports every problem with s at once, each naming its field.
// The result wraps ErrInvalidSettings.
func (s Settings) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if s.MaxConcurrent < 1 {
		add("max_concurrent: must be at least 1, got %d", s.MaxConcurrent)
	}
	if s.MaxQueue < 0 {
		add("max_queue: must not be negative, got %d", s.MaxQueue)
	}
	if s.MaxWait < 0 {
		add("max_wait: must not be negative, got %s", s.MaxWait)
	}
	badFrac := func(f float64) bool { return math.IsNaN(f) || f < 0 || f >= 1 }
	if badFrac(s.ReserveCritical) {
		add("reserve.critical: must be in [0, 1), got %v", s.ReserveCritical)
	}
	if badFrac(s.ReserveNormal) {
		add("reserve.normal: must be in [0, 1), got %v", s.ReserveNormal)
	}
	switch s.Queue {
	case FIFO:
		if s.CoDelTarget != 0 || s.CoDelInterval != 0 {
			add("codel: only with queue codel, got target %s, interval %s", s.CoDelTarget, s.CoDelInterval)
		}
	case CoDel:
		if s.CoDelTarget <= 0 {
			add("codel.target: must be positive, got %s", s.CoDelTarget)
		}
		if s.CoDelInterval <= 0 || s.CoDelInterval <= s.CoDelTarget {
			add("codel.interval: must be positive and above codel.target, got %s", s.CoDelInterval)
		}
	default:
		add("queue: must be fifo or codel, got %s", s.Queue)
	}
	if len(errs) == 0 && s.Ceiling(BestEffort) < 1 {
		add("reserve: critical %v + normal %v leave best_effort no permit of max_concurrent %d",
			s.ReserveCritical, s.ReserveNormal, s.MaxConcurrent)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidSettings, errors.Join(errs...))
}
