package permit

import "fmt"

// Source says what ended a lease. It is a closed set, used as a metric label.
type Source uint8

// The sources of a release.
const (
	// AccessLog: Envoy's access log for the request arrived.
	AccessLog Source = iota
	// TTL: the lease expired before any release.
	TTL
	// Cancel: the Check was cancelled after the permit was granted.
	Cancel
	// Shutdown: the ledger was closed.
	Shutdown

	numSources = 4
)

var sourceNames = [numSources]string{"access_log", "ttl", "cancel", "shutdown"}

// Sources lists every source.
func Sources() []Source { return []Source{AccessLog, TTL, Cancel, Shutdown} }

// String returns the source's metric name.
func (s Source) String() string {
	if int(s) < numSources {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}
