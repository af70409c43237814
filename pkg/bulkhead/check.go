package bulkhead

// UnmatchedOutcome says what became of a Check that named no configured
// bulkhead; its value is a metric label. The Check server (package authz)
// reports it and the metrics count it.
type UnmatchedOutcome string

// The unmatched outcomes.
const (
	UnmatchedAllowed   UnmatchedOutcome = "allowed"   // answered OK without a permit
	UnmatchedDenied    UnmatchedOutcome = "denied"    // rejected, reason unknown_bulkhead
	UnmatchedDefaulted UnmatchedOutcome = "defaulted" // served by the policy's default bulkhead
)

// Input names a request input of a Check that was ignored because its
// value was invalid; its value is a metric label. The Check server (package
// authz) reports it and the metrics count it.
type Input string

// The inputs.
const (
	InputTenant Input = "tenant" // a tenant header value over the length bound (no tenant)
	InputNode   Input = "node"   // node metadata given twice or not a valid node id
)

// Inputs lists every input.
func Inputs() []Input { return []Input{InputTenant, InputNode} }
