package permit

// The Envoy contract of a permit, shared by the ext_authz answer that hands
// a token out and the access-log entries that bring it back.
//
// An OK answer carries dynamic_metadata {MetadataToken: token,
// MetadataBulkhead: bulkhead}. Envoy stores it under the filter's namespace,
// and every access-log entry of the request or connection (periodic and
// final) carries it in common_properties.metadata.filter_metadata[namespace]
// (checked with Envoy 1.40 for both filters, TCP periodic entries included).
const (
	// MetadataNamespace is where Envoy puts the HTTP ext_authz filter's
	// metadata.
	MetadataNamespace = "envoy.filters.http.ext_authz"
	// MetadataNamespaceNetwork is where Envoy puts the network (TCP)
	// ext_authz filter's metadata.
	MetadataNamespaceNetwork = "envoy.filters.network.ext_authz"
	// MetadataToken is the key of the permit's token.
	MetadataToken = "bulkhead_permit"
	// MetadataBulkhead is the key of the permit's bulkhead.
	MetadataBulkhead = "bulkhead"
)

// LabelPriority is the Envoy node metadata label that names the class of
// the connections that Envoy opens (critical, normal or best_effort). The
// network ext_authz filter sends the node's labels as the Check's
// destination labels when its bootstrap_metadata_labels_key names the
// node metadata field that holds them (checked with Envoy 1.40). A label is
// the operator's (set in the Envoy's bootstrap, one per workload), never a
// client's, so it may raise the class as well as lower it.
const LabelPriority = "bulkhead_priority"

// MetadataNamespaceOf is the namespace of a connection's permit metadata
// (conn) or of a request's.
func MetadataNamespaceOf(conn bool) string {
	if conn {
		return MetadataNamespaceNetwork
	}
	return MetadataNamespace
}

// MaxNodeIDLen is the longest Envoy node id a lease records.
const MaxNodeIDLen = 256

// ValidNodeID reports whether id can name an Envoy node as a permit's
// holder: 1..MaxNodeIDLen bytes of visible ASCII (0x21..0x7e), so that it is
// safe in a header, a log line and a map key. Both places a node id comes
// from (the Check's x-bulkhead-node metadata and the access-log stream's
// Identifier) use this rule.
func ValidNodeID(id string) bool {
	if id == "" || len(id) > MaxNodeIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// EntryResult says what was done with one access-log entry; its value is
// the result label of bulkhead_access_log_entries_total.
type EntryResult string

// The results of access-log entries.
const (
	EntryReleased  EntryResult = "released"  // the end entry's token released its permit
	EntryRenewed   EntryResult = "renewed"   // the periodic entry's token renewed its lease
	EntryAdopted   EntryResult = "adopted"   // the periodic entry's permit, unknown, was adopted
	EntryDuplicate EntryResult = "duplicate" // its permit had already ended
	EntryLate      EntryResult = "late"      // a periodic entry that came after its request's end entry
	EntryUnknown   EntryResult = "unknown"   // a token the ledger does not know (nor adopts)
	EntryNoToken   EntryResult = "no_token"  // an end entry without a permit token
	EntryNotEnd    EntryResult = "not_end"   // neither an end entry nor a periodic one with a token
	// EntryLedgerUnavailable: the shared ledger did not answer; the lease
	// ends by expiry (a release) or is adopted by a later entry (a renewal).
	EntryLedgerUnavailable EntryResult = "ledger_unavailable"
	// EntryForwarded: a token the shared ledger does not know, passed to
	// the replicas that hold capacity leases (the one that admitted it from
	// its lease serves it).
	EntryForwarded EntryResult = "forwarded"
)

// EntryResults lists every result.
func EntryResults() []EntryResult {
	return []EntryResult{EntryReleased, EntryRenewed, EntryAdopted, EntryDuplicate, EntryLate, EntryUnknown, EntryNoToken,
		EntryNotEnd, EntryLedgerUnavailable, EntryForwarded}
}

// HeartbeatProblem is a sign that an Envoy does not keep its permits'
// leases alive with periodic access-log entries; its value is the problem
// label of bulkhead_heartbeat_problems_total.
type HeartbeatProblem string

// The heartbeat problems.
const (
	// NoPeriodic: a request held its permit for several intervals and ended
	// without one periodic entry: its Envoy does not send them
	// (access_log_flush_interval is not set, or its access log filters
	// periodic entries out).
	NoPeriodic HeartbeatProblem = "no_periodic_entries"
	// EndedAfterExpiry: a request's end entry arrived after its permit had
	// been reclaimed by expiry: while it still ran, the bulkhead could admit
	// one request too many.
	EndedAfterExpiry HeartbeatProblem = "ended_after_expiry"
	// RenewedAfterExpiry: a periodic entry arrived after its permit had been
	// reclaimed by expiry (the permit is adopted again): Envoy or the stream
	// stalled for longer than the TTL.
	RenewedAfterExpiry HeartbeatProblem = "renewed_after_expiry"
)

// HeartbeatProblems lists every problem.
func HeartbeatProblems() []HeartbeatProblem {
	return []HeartbeatProblem{NoPeriodic, EndedAfterExpiry, RenewedAfterExpiry}
}
