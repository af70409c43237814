package permit

// The Envoy contract of a permit, shared by the ext_authz answer that hands
// a token out and the access-log entries that bring it back.
//
// An OK answer carries dynamic_metadata {MetadataToken: token,
// MetadataBulkhead: bulkhead}. Envoy stores it under MetadataNamespace, and
// every access-log entry of the request (periodic and final) carries it in
// common_properties.metadata.filter_metadata[MetadataNamespace].
const (
	// MetadataNamespace is where Envoy puts the ext_authz filter's metadata.
	MetadataNamespace = "envoy.filters.http.ext_authz"
	// MetadataToken is the key of the permit's token.
	MetadataToken = "bulkhead_permit"
	// MetadataBulkhead is the key of the permit's bulkhead.
	MetadataBulkhead = "bulkhead"
)

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
