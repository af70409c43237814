package bulkhead

import "fmt"

// Priority is a request's class. Lower values are more important: Critical
// is served before Normal, Normal before BestEffort.
type Priority uint8

// The priority classes, highest first.
const (
	Critical Priority = iota
	Normal
	BestEffort

	numPriorities = 3
)

// Priorities lists every class, highest first.
func Priorities() []Priority { return []Priority{Critical, Normal, BestEffort} }

var priorityNames = [numPriorities]string{"critical", "normal", "best_effort"}

// String returns the class's configuration and metric name.
func (p Priority) String() string {
	if int(p) < numPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// Valid reports whether p is one of the defined classes.
func (p Priority) Valid() bool { return int(p) < numPriorities }

// ParsePriority maps "critical", "normal" or "best_effort" to its class.
// Anything else is ErrUnknownPriority.
func ParsePriority(s string) (Priority, error) {
	for i, n := range priorityNames {
		if s == n {
			return Priority(i), nil
		}
	}
	return Normal, fmt.Errorf("%w: %q (want critical, normal or best_effort)", ErrUnknownPriority, s)
}
