package authz

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// UnmatchedPolicy says what to do with a Check that names no bulkhead, or
// one that is not configured. It is also the type of the configuration's
// authz.unknown_bulkhead, whose values are its String forms. The zero value
// is Deny.
type UnmatchedPolicy uint8

// The policies for unmatched Checks.
const (
	// Deny answers with a rejection, reason unknown_bulkhead.
	Deny UnmatchedPolicy = iota
	// Allow answers OK without taking a permit.
	Allow
	// UseDefault takes a permit from Policy.DefaultBulkhead.
	UseDefault
)

// ErrUnknownUnmatchedPolicy is wrapped by ParseUnmatchedPolicy's error.
var ErrUnknownUnmatchedPolicy = errors.New("unknown unmatched-bulkhead policy")

var unmatchedNames = [...]string{Deny: "deny", Allow: "allow", UseDefault: "default"}

// String returns the policy's configuration name: deny, allow or default.
func (p UnmatchedPolicy) String() string {
	if int(p) < len(unmatchedNames) {
		return unmatchedNames[p]
	}
	return fmt.Sprintf("unmatched_policy(%d)", uint8(p))
}

// ParseUnmatchedPolicy maps "deny", "allow" or "default" to its policy.
// Anything else is Deny and an error wrapping ErrUnknownUnmatchedPolicy.
func ParseUnmatchedPolicy(s string) (UnmatchedPolicy, error) {
	for i, n := range unmatchedNames {
		if s == n {
			return UnmatchedPolicy(i), nil
		}
	}
	return Deny, fmt.Errorf("%w: %q (want deny, allow or default)", ErrUnknownUnmatchedPolicy, s)
}

// Defaults of the Policy fields (DefaultPolicy), which the configuration
// takes as its own.
const (
	DefaultPriorityHeader   = "x-bulkhead-priority"
	DefaultPriority         = bulkhead.Normal
	DefaultUnmatched        = Deny
	DefaultDenyStatus       = 503
	DefaultDeadlineMargin   = 25 * time.Millisecond
	DefaultRetryAfter       = time.Second
	DefaultLeaseTTL         = 60 * time.Second
	DefaultMaxRouteLeaseTTL = 10 * time.Minute
)

// Settings are the Check policy's own settings: the configuration's authz
// section holds them as they are (config.Config.Authz), and Policy adds
// what other sections give. Adding a Check setting is a field here, its
// default (DefaultPolicy) and its row in the configuration's settings
// table, which also validates it.
type Settings struct {
	// PriorityHeader is the request header that carries the class ("" to
	// ignore headers). Envoy sends header names in lower case; the
	// configuration requires it so.
	PriorityHeader string
	// TenantHeader is the request header naming the tenant ("" = tenants
	// off); it differs from PriorityHeader. Bulkheads with a tenant
	// template then give each tenant its own sub-bulkhead inside their
	// limit.
	TenantHeader string
	// DefaultPriority is used when no class is given or the given one is
	// unknown.
	DefaultPriority bulkhead.Priority
	// Unmatched says what to do with Checks that name no bulkhead, or one
	// that is not configured (authz.unknown_bulkhead).
	Unmatched UnmatchedPolicy
	// DefaultBulkhead is where UseDefault sends such Checks: set iff
	// Unmatched is UseDefault, and a configured bulkhead.
	DefaultBulkhead string
	// DenyStatus is the HTTP status of rejections, 400..599.
	DenyStatus int
	// DeadlineMargin: waits end this long before the Check's deadline;
	// [0, 1s).
	DeadlineMargin time.Duration
	// RetryAfter is sent as the retry-after header (whole seconds, >= 1);
	// positive.
	RetryAfter time.Duration
	// TrustedPrioritySources are the downstream networks (canonical CIDR
	// prefixes) whose PriorityHeader is honoured as sent. From any other
	// source address (attributes.source.address of the Check, as Envoy sees
	// the downstream) the header may only lower the class the route or
	// DefaultPriority gives; a raise is ignored and counted
	// (InputRecorder.UntrustedPriority). nil trusts no one.
	TrustedPrioritySources []netip.Prefix
}

// Policy is how the server answers: its Settings, and what the leases and
// the bulkheads of the configuration add. Values are immutable once passed
// to the Server.
type Policy struct {
	Settings
	// HeartbeatTTL, when > 0, is the lease of every permit: Envoy's
	// periodic access log renews it while the request runs. The long
	// leases below then apply only to permits of nodes known not to send
	// periodic entries (WithSilentNodes). 0 = heartbeats off.
	HeartbeatTTL time.Duration
	// LeaseTTL per bulkhead; DefaultLeaseTTL for the others.
	LeaseTTL        map[string]time.Duration
	DefaultLeaseTTL time.Duration
	// MaxRouteLeaseTTL caps a route's own lease (context_extensions
	// lease_ttl); <= 0 ignores route leases (each is counted as invalid).
	MaxRouteLeaseTTL time.Duration
	// Connections maps a listener port to the bulkhead of the TCP
	// connections Envoy accepts on it: a network Check (one without an
	// HTTP request) names its bulkhead by its destination port.
	Connections map[uint32]Connection
}

// Connection is the bulkhead of the connections of one listener port, and
// their class unless the Envoy's permit.LabelPriority label names another.
type Connection struct {
	Bulkhead string
	Priority bulkhead.Priority
}

// DefaultPolicy returns the documented defaults.
func DefaultPolicy() Policy {
	return Policy{
		Settings: Settings{
			PriorityHeader:  DefaultPriorityHeader,
			DefaultPriority: DefaultPriority,
			Unmatched:       DefaultUnmatched,
			DenyStatus:      DefaultDenyStatus,
			DeadlineMargin:  DefaultDeadlineMargin,
			RetryAfter:      DefaultRetryAfter,
		},
		DefaultLeaseTTL:  DefaultLeaseTTL,
		MaxRouteLeaseTTL: DefaultMaxRouteLeaseTTL,
	}
}

func (p Policy) normalised() Policy {
	p.PriorityHeader = strings.ToLower(p.PriorityHeader)
	p.TenantHeader = strings.ToLower(p.TenantHeader)
	return p
}
