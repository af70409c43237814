package envoy

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// ErrInvalidParams is wrapped by every error Render returns for bad Params.
var ErrInvalidParams = errors.New("invalid envoy params")

// Defaults applied by Render to zero-valued Params fields.
const (
	DefaultAddress         = "127.0.0.1"
	DefaultNodeID          = "front-proxy"
	DefaultListenerName    = "front"
	DefaultExtAuthzTimeout = time.Second
	// DefaultSharesMaxRequest is the share routes' timeout: the daemon's
	// default shares.max_request_duration.
	DefaultSharesMaxRequest = 5 * time.Second
	DefaultStatusOnError    = 503
)

// BulkheadClusterName is the Envoy cluster of the Bulkhead daemon; routes may
// not use it.
const BulkheadClusterName = "bulkhead"

// Endpoint is a host (IP literal: STATIC cluster; name: STRICT_DNS) and port.
type Endpoint struct {
	Host string
	Port int
}

// String returns host:port.
func (e Endpoint) String() string { return net.JoinHostPort(e.Host, fmt.Sprint(e.Port)) }

// Route sends requests whose path starts with Prefix to the upstream cluster
// Name, guarded by a bulkhead.
type Route struct {
	// Name is the upstream cluster's name; also the bulkhead key unless
	// Bulkhead is set.
	Name string
	// Prefix is the path prefix matched, e.g. "/catalog".
	Prefix string
	// Bulkhead is the context_extensions "bulkhead" key; "" means Name.
	Bulkhead string
	// Priority, if set, is the context_extensions "priority" key
	// (critical, normal or best_effort).
	Priority string
	// Unguarded disables ext_authz on the route (no Check, no permit): a
	// baseline for benchmarks, or a route that needs no bulkhead.
	Unguarded bool
	// Timeout, if set, is the route's upstream timeout (Envoy's default is
	// 15s); Envoy answers 504 when it passes. Whole milliseconds.
	Timeout time.Duration
	// LeaseTTL, if set, is the context_extensions "lease_ttl" key: the
	// lease of this route's permits instead of the bulkhead's (capped by
	// the daemon's leases.max_route_ttl). Whole milliseconds.
	LeaseTTL time.Duration
	// Upstream is the single endpoint of the cluster (plain HTTP/1.1).
	Upstream Endpoint
	// Shares makes the route a pair for a bulkhead in the daemon's
	// shares.mode shares or auto: first the route above, gated by the
	// runtime key bulkhead.strict.<bulkhead> (100% by default: strict,
	// until the daemon's runtime layer says 0), then a twin of it to the
	// bulkhead's share cluster (SharesCluster) with ext_authz disabled,
	// whose circuit breaker the daemon sizes over RTDS (its static
	// max_requests is 0: no share, no request). A critical route's pair
	// has the bulkhead's critical share cluster and strict key: its
	// requests run under the Envoy's critical share, which the daemon
	// holds at priority critical. A bulkhead has at most one share route
	// of each class (the share clusters would have one name).
	Shares bool
}

// critical reports whether the route's requests are of class critical.
func (r Route) critical() bool {
	p, err := bulkhead.ParsePriority(r.Priority)
	return err == nil && p == bulkhead.Critical
}

// SharesCluster is the Envoy cluster of the route's share route: the
// bulkhead's name and "_shares" (the daemon's default
// bulkheads.<name>.shares.cluster), and "_critical" after it for a
// critical route (shares.CriticalCluster).
func (r Route) SharesCluster() string {
	c := shares.DefaultCluster(r.BulkheadName())
	if r.critical() {
		return shares.CriticalCluster(c)
	}
	return c
}

// StrictKey is the runtime key that gates the route's strict half
// (shares.CriticalStrictKey for a critical route).
func (r Route) StrictKey() string {
	if r.critical() {
		return shares.CriticalStrictKey(r.BulkheadName())
	}
	return shares.StrictKey(r.BulkheadName())
}

// SharesXDSCluster is the cluster of the shares' RTDS and LRS streams:
// bulkhead, or with several replicas (and no BulkheadAffinity, whose one
// connection per thread already keeps the main thread's streams on one
// replica) bulkhead_xds, whose replicas are priorities in order, so that
// both streams reach the same replica.
func (p Params) SharesXDSCluster() string {
	if len(p.BulkheadReplicas) > 0 && !p.BulkheadAffinity {
		return "bulkhead_xds"
	}
	return "bulkhead"
}

// SharesOn reports whether any route has a share route: the bootstrap then
// takes the runtime layer and sends load reports to the daemon.
func (p Params) SharesOn() bool {
	for _, r := range p.Routes {
		if r.Shares && !r.Unguarded {
			return true
		}
	}
	return false
}

// BulkheadEndpoints returns the endpoints of the Bulkhead cluster: Bulkhead,
// then BulkheadReplicas.
func (p Params) BulkheadEndpoints() []Endpoint {
	return append([]Endpoint{p.Bulkhead}, p.BulkheadReplicas...)
}

// BulkheadReplicasCluster is the cluster of the replicas behind the
// bulkhead cluster's internal listener (BulkheadAffinity).
const BulkheadReplicasCluster = "bulkhead_replicas"

// BulkheadAffinityListener is the internal listener the bulkhead cluster
// connects to with BulkheadAffinity.
const BulkheadAffinityListener = "bulkhead_affinity"

// BulkheadName returns the bulkhead key sent in the route's CheckRequests.
func (r Route) BulkheadName() string {
	if r.Bulkhead != "" {
		return r.Bulkhead
	}
	return r.Name
}

// Params are the inputs of the front-proxy template. Zero values get the
// defaults above; ports may be 0 for the listener and the admin interface
// (the kernel picks; see pkg/envoyproc to read them back).
type Params struct {
	NodeID      string // node.id; default DefaultNodeID
	NodeCluster string // node.cluster; default NodeID

	ListenerName    string // default DefaultListenerName
	ListenerAddress string // default DefaultAddress
	ListenerPort    int

	AdminAddress string // default DefaultAddress
	AdminPort    int

	// Bulkhead is the daemon's gRPC endpoint (ext_authz and access logs).
	Bulkhead Endpoint
	// BulkheadReplicas are further endpoints of the same cluster: daemon
	// replicas sharing one ledger (ledger.backend redis), among which Envoy
	// balances Checks and access-log streams. Their hosts are of Bulkhead's
	// kind (all IP literals or all DNS names: one discovery type).
	// With any, Envoy health-checks the replicas over gRPC health and
	// retries a Check that could not reach one.
	BulkheadReplicas []Endpoint
	// BulkheadAffinity keeps each Envoy worker on one replica, for its
	// Checks and its access-log streams alike: the bulkhead cluster has one
	// endpoint, an internal listener whose TCP proxy balances connections
	// (not calls) over the replicas (cluster BulkheadReplicasCluster, which
	// is health-checked and closes a failing replica's connections). With
	// capacity leases an entry then reaches the replica that admitted its
	// request, and none is forwarded. Needs BulkheadReplicas.
	BulkheadAffinity bool
	// Routes, matched in order.
	Routes []Route

	// ExtAuthzTimeout is the Check RPC deadline; it must exceed every
	// bulkhead's max_wait. Default DefaultExtAuthzTimeout.
	ExtAuthzTimeout time.Duration
	// FailureModeAllow lets requests through when Bulkhead cannot decide.
	FailureModeAllow bool
	// StatusOnError is the HTTP status sent when Bulkhead cannot decide
	// (unreachable, gRPC error, Check timeout). Default DefaultStatusOnError.
	StatusOnError int
	// HeartbeatInterval is the HTTP connection manager's
	// access_log_flush_interval: Envoy logs each request in flight this
	// often, and each such entry renews its permit's lease. It must equal
	// the daemon's leases.heartbeat_interval. Default
	// permit.DefaultHeartbeatInterval; whole milliseconds.
	HeartbeatInterval time.Duration
	// NoHeartbeat leaves the periodic access log out: an Envoy configured
	// before heartbeat leases (its long requests' permits are reclaimed
	// under them, which the daemon detects and reports).
	NoHeartbeat bool
	// SingleAccessLog sends periodic entries on the release log, unbuffered
	// like the end entries (one gRPC message each), instead of on a second,
	// batched logger (log_name "bulkhead-heartbeat", HeartbeatFlushInterval):
	// the form before batching, kept for comparison (the bench harness).
	SingleAccessLog bool
	// NoNodeMetadata leaves out the x-bulkhead-node initial_metadata of the
	// Check, as Istio's ext_authz provider does: permits name no holder.
	NoNodeMetadata bool
	// AccessLogExcludeHeader, if set, names a request header whose presence
	// keeps the request out of the access log (its permit then leaks until
	// the lease expires). "" = every request is logged.
	AccessLogExcludeHeader string

	// BulkheadTLS, when set, makes Envoy connect to the daemon over TLS (the
	// daemon's listen.grpc_tls), and over mutual TLS with a client
	// certificate. nil = plaintext HTTP/2.
	BulkheadTLS *UpstreamTLS

	// TCPListeners are listeners whose TCP connections are bulkheaded:
	// Envoy's network ext_authz filter asks the daemon for a permit before
	// a connection proceeds, and the TCP proxy's access log gives it back
	// when the connection closes (and renews it every HeartbeatInterval
	// while it is open).
	TCPListeners []TCPListener
	// SharesMaxRequest is the timeout of every share route: at most the
	// daemon's shares.max_request_duration. Default 5s (its default).
	SharesMaxRequest time.Duration

	// NodePriority, if set, is the node metadata label
	// permit.LabelPriority: the class of every connection this Envoy
	// opens through TCPListeners (the daemon's bulkheads.<name>.connections
	// priority otherwise).
	NodePriority string

	// Room for later: downstream TLS settings.
}

// TCPListener proxies the connections accepted on Port to Upstream, each
// holding a permit of the daemon's connection bulkhead whose
// connections.ports lists Port: a network Check names its bulkhead by the
// port it came in on.
type TCPListener struct {
	// Name names the listener and its upstream cluster (not "bulkhead",
	// nor a route's cluster).
	Name string
	// Port is the listener's port, 1..65535: the daemon must know it.
	Port int
	// Upstream is the single endpoint of the cluster (plain TCP).
	Upstream Endpoint
	// Unguarded leaves the bulkhead out (no Check, no access log): a
	// baseline for benchmarks.
	Unguarded bool
}

// LabelPriority is the node metadata label NodePriority sets.
func (Params) LabelPriority() string { return permit.LabelPriority }

// PermitLogFilter is the access-log filter, as one flow-style YAML line,
// that logs only what holds a permit: the token in the ext_authz filter's
// dynamic metadata (the network filter's for a connection, conn, else the
// HTTP filter's). The chart's bulkhead.permitLogFilter writes the same.
func (Params) PermitLogFilter(conn bool) string {
	return fmt.Sprintf("metadata_filter: {matcher: {filter: %q, path: [{key: %q}], value: {present_match: true}}, match_if_key_not_found: false}",
		permit.MetadataNamespaceOf(conn), permit.MetadataToken)
}

// PermitLogExpression is PermitLogFilter for requests as a CEL expression,
// for Envoy's CEL access-log filter (envoy.access_loggers.extension_filters.cel):
// what a configuration that cannot write a metadata_filter uses, such as
// Istio's Telemetry API (accessLogging filter.expression; the chart's
// istio.telemetryFilter). It is true when the ext_authz filter's dynamic
// metadata holds a permit token, for end and periodic entries alike, and
// false, without an evaluation error, when the namespace is absent (a
// request that no Check answered with metadata).
func PermitLogExpression() string {
	ns := permit.MetadataNamespace
	return fmt.Sprintf("'%s' in metadata.filter_metadata && '%s' in metadata.filter_metadata['%s']", ns, permit.MetadataToken, ns)
}

// HeartbeatLog reports whether periodic entries have an access logger of
// their own (heartbeats on, and not SingleAccessLog).
func (p Params) HeartbeatLog() bool { return !p.NoHeartbeat && !p.SingleAccessLog }

// HeartbeatFlushInterval is the heartbeat logger's buffer_flush_interval: a
// quarter of the heartbeat interval (its default when 0; whole
// milliseconds, at least one). A periodic entry then arrives at most 1.25
// intervals after the one before, well within a lease (leases.heartbeat_ttl
// is at least 2 intervals).
func (p Params) HeartbeatFlushInterval() time.Duration {
	i := p.HeartbeatInterval
	if i == 0 {
		i = permit.DefaultHeartbeatInterval
	}
	return max(time.Millisecond, (i / 4).Truncate(time.Millisecond))
}

// UpstreamTLS is how Envoy connects to the Bulkhead daemon over TLS. Envoy
// reads the files when it starts.
type UpstreamTLS struct {
	// CAFile is the PEM bundle of the CAs that sign the daemon's
	// certificate (required).
	CAFile string
	// ServerName is sent as SNI, and the daemon's certificate must carry it
	// as a DNS name. Default: Bulkhead.Host when that is a DNS name. When
	// Bulkhead.Host is an IP address and ServerName is empty, no SNI is sent
	// and the certificate must carry that IP address.
	ServerName string
	// CertFile and KeyFile are Envoy's client certificate chain and key
	// (PEM), for a daemon that requires mTLS (listen.grpc_tls.client_ca_file):
	// both or neither.
	CertFile, KeyFile string
}

// DemoRoutes returns the three demo routes /catalog, /auth and /orders, each
// to the cluster and bulkhead of the same name.
func DemoRoutes(catalog, auth, orders Endpoint) []Route {
	return []Route{
		{Name: "catalog", Prefix: "/catalog", Upstream: catalog},
		{Name: "auth", Prefix: "/auth", Upstream: auth},
		{Name: "orders", Prefix: "/orders", Upstream: orders},
	}
}

// DemoParams returns the demo's fixed ports: listener 10000, admin 9901,
// Bulkhead gRPC 9001, upstreams catalog 8081, auth 8082, orders 8083, all
// on 127.0.0.1. The orders route has a share route (bulkhead orders is in
// shares mode auto in the demo's configuration).
func DemoParams() Params {
	p := Params{
		ListenerPort: 10000,
		AdminPort:    9901,
		Bulkhead:     Endpoint{Host: DefaultAddress, Port: 9001},
		Routes: DemoRoutes(
			Endpoint{Host: DefaultAddress, Port: 8081},
			Endpoint{Host: DefaultAddress, Port: 8082},
			Endpoint{Host: DefaultAddress, Port: 8083},
		),
	}
	p.Routes[2].Shares = true // orders: shares far from its limit (the demo's bulkheads.orders.shares)
	return p
}

var (
	// Bulkhead names, as in the daemon's config.
	namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$`)
	// HTTP header names as Envoy stores them (lower case token characters).
	headerPattern = regexp.MustCompile(`^[a-z0-9!#$%&'*+.^_|~` + "`" + `-]+$`)
	// Hosts: IP literals or DNS names.
	hostPattern = regexp.MustCompile(`^[A-Za-z0-9.:_-]+$`)
	// DNS names (SNI).
	dnsPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)
	// Path prefixes: no quotes, spaces or control characters.
	prefixPattern = regexp.MustCompile(`^/[A-Za-z0-9/._~%!$&'()*+,;=:@-]*$`)
)

// withDefaults returns p with zero fields replaced by their defaults.
func (p Params) withDefaults() Params {
	if p.NodeID == "" {
		p.NodeID = DefaultNodeID
	}
	if p.NodeCluster == "" {
		p.NodeCluster = p.NodeID
	}
	if p.ListenerName == "" {
		p.ListenerName = DefaultListenerName
	}
	if p.ListenerAddress == "" {
		p.ListenerAddress = DefaultAddress
	}
	if p.AdminAddress == "" {
		p.AdminAddress = DefaultAddress
	}
	if p.ExtAuthzTimeout == 0 {
		p.ExtAuthzTimeout = DefaultExtAuthzTimeout
	}
	if p.HeartbeatInterval == 0 {
		p.HeartbeatInterval = permit.DefaultHeartbeatInterval
	}
	if p.SharesMaxRequest == 0 {
		p.SharesMaxRequest = DefaultSharesMaxRequest
	}
	if p.StatusOnError == 0 {
		p.StatusOnError = DefaultStatusOnError
	}
	if p.BulkheadTLS != nil {
		t := *p.BulkheadTLS // a copy: the caller's stays as it was
		// The host's name is the certificate's only with one daemon: with
		// replicas every one is checked against ServerName (validate).
		if t.ServerName == "" && net.ParseIP(p.Bulkhead.Host) == nil && len(p.BulkheadReplicas) == 0 {
			t.ServerName = p.Bulkhead.Host
		}
		p.BulkheadTLS = &t
	}
	return p
}

// validate reports every problem in p (after defaults) at once.
func (p Params) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	checkName := func(field, v string) {
		if !namePattern.MatchString(v) {
			bad("%s %q: want %s", field, v, namePattern)
		}
	}
	checkName("NodeID", p.NodeID)
	checkName("NodeCluster", p.NodeCluster)
	checkName("ListenerName", p.ListenerName)
	checkIP := func(field, v string) {
		if net.ParseIP(v) == nil {
			bad("%s %q: want an IP address", field, v)
		}
	}
	checkIP("ListenerAddress", p.ListenerAddress)
	checkIP("AdminAddress", p.AdminAddress)
	checkPort := func(field string, port, min int) {
		if port < min || port > 65535 {
			bad("%s %d: want %d..65535", field, port, min)
		}
	}
	checkPort("ListenerPort", p.ListenerPort, 0)
	checkPort("AdminPort", p.AdminPort, 0)
	checkEndpoint := func(field string, e Endpoint) {
		if !hostPattern.MatchString(e.Host) {
			bad("%s.Host %q: want an IP address or DNS name", field, e.Host)
		}
		checkPort(field+".Port", e.Port, 1)
	}
	checkEndpoint("Bulkhead", p.Bulkhead)
	seenEndpoint := map[Endpoint]bool{p.Bulkhead: true}
	for i, e := range p.BulkheadReplicas {
		field := fmt.Sprintf("BulkheadReplicas[%d]", i)
		checkEndpoint(field, e)
		if seenEndpoint[e] {
			bad("%s %s: duplicate endpoint", field, e)
		}
		seenEndpoint[e] = true
		if (net.ParseIP(e.Host) == nil) != (net.ParseIP(p.Bulkhead.Host) == nil) {
			bad("%s.Host %q: want an IP address or DNS name as Bulkhead.Host %q (one discovery type per cluster)", field, e.Host, p.Bulkhead.Host)
		}
	}
	if p.BulkheadAffinity && len(p.BulkheadReplicas) == 0 {
		bad("BulkheadAffinity: needs BulkheadReplicas (one daemon needs no affinity)")
	}
	if t := p.BulkheadTLS; t != nil && t.ServerName == "" && len(p.BulkheadReplicas) > 0 {
		bad("BulkheadTLS.ServerName: must be set with BulkheadReplicas (one certificate name for every replica)")
	}
	if len(p.Routes) == 0 {
		bad("Routes: want at least one")
	}
	// Routes and TCP listeners name clusters: one namespace.
	seen := make(map[string]bool, len(p.Routes)+len(p.TCPListeners))
	checkCluster := func(field, name string) {
		switch {
		case !namePattern.MatchString(name):
			bad("%s.Name %q: want %s", field, name, namePattern)
		case name == BulkheadClusterName, name == BulkheadReplicasCluster:
			bad("%s.Name %q: reserved for the Bulkhead clusters", field, name)
		case seen[name]:
			bad("%s.Name %q: duplicate (route and TCP listener clusters share one namespace)", field, name)
		}
		seen[name] = true
	}
	for i, r := range p.Routes {
		field := fmt.Sprintf("Routes[%d]", i)
		checkCluster(field, r.Name)
		if !prefixPattern.MatchString(r.Prefix) {
			bad("%s.Prefix %q: want a path starting with /", field, r.Prefix)
		}
		if r.Bulkhead != "" && !namePattern.MatchString(r.Bulkhead) {
			bad("%s.Bulkhead %q: want %s", field, r.Bulkhead, namePattern)
		}
		if r.Unguarded && (r.Bulkhead != "" || r.Priority != "" || r.LeaseTTL != 0 || r.Shares) {
			bad("%s: an Unguarded route takes no Bulkhead, Priority, LeaseTTL or Shares", field)
		}
		if r.Shares && !r.Unguarded {
			checkCluster(field+" share cluster", r.SharesCluster())
		}
		if r.Timeout < 0 || r.Timeout%time.Millisecond != 0 {
			bad("%s.Timeout %v: want 0 (Envoy's default) or a positive whole number of milliseconds", field, r.Timeout)
		}
		if r.LeaseTTL < 0 || r.LeaseTTL%time.Millisecond != 0 {
			bad("%s.LeaseTTL %v: want 0 (the bulkhead's) or a positive whole number of milliseconds", field, r.LeaseTTL)
		}
		if r.Priority != "" {
			if _, err := bulkhead.ParsePriority(r.Priority); err != nil {
				bad("%s.Priority: %w", field, err)
			}
		}
		checkEndpoint(field+".Upstream", r.Upstream)
	}
	ports := map[int]bool{p.ListenerPort: true}
	for i, l := range p.TCPListeners {
		field := fmt.Sprintf("TCPListeners[%d]", i)
		checkCluster(field, l.Name)
		checkPort(field+".Port", l.Port, 1)
		if ports[l.Port] {
			bad("%s.Port %d: used by another listener", field, l.Port)
		}
		ports[l.Port] = true
		checkEndpoint(field+".Upstream", l.Upstream)
	}
	if p.NodePriority != "" {
		if _, err := bulkhead.ParsePriority(p.NodePriority); err != nil {
			bad("NodePriority: %w", err)
		}
	}
	if p.ExtAuthzTimeout <= 0 || p.ExtAuthzTimeout%time.Millisecond != 0 {
		bad("ExtAuthzTimeout %v: want a positive whole number of milliseconds", p.ExtAuthzTimeout)
	}
	if p.SharesMaxRequest <= 0 || p.SharesMaxRequest%time.Millisecond != 0 {
		bad("SharesMaxRequest %v: want a positive whole number of milliseconds", p.SharesMaxRequest)
	}
	if p.HeartbeatInterval < 0 || p.HeartbeatInterval%time.Millisecond != 0 {
		bad("HeartbeatInterval %v: want a positive whole number of milliseconds", p.HeartbeatInterval)
	}
	if p.StatusOnError < 200 || p.StatusOnError > 599 {
		bad("StatusOnError %d: want 200..599", p.StatusOnError)
	}
	if p.AccessLogExcludeHeader != "" && !headerPattern.MatchString(p.AccessLogExcludeHeader) {
		bad("AccessLogExcludeHeader %q: want a lower-case header name", p.AccessLogExcludeHeader)
	}
	if t := p.BulkheadTLS; t != nil {
		if t.CAFile == "" {
			bad("BulkheadTLS.CAFile: required (the CA bundle that signs the daemon's certificate)")
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			bad("BulkheadTLS.CertFile, BulkheadTLS.KeyFile: set both (mTLS) or neither")
		}
		if t.ServerName != "" && (!dnsPattern.MatchString(t.ServerName) || net.ParseIP(t.ServerName) != nil) {
			bad("BulkheadTLS.ServerName %q: want a DNS name (SNI cannot be an IP address)", t.ServerName)
		}
		for field, path := range map[string]string{"CAFile": t.CAFile, "CertFile": t.CertFile, "KeyFile": t.KeyFile} {
			if strings.ContainsFunc(path, unicode.IsControl) {
				bad("BulkheadTLS.%s %q: control characters", field, path)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidParams, errors.Join(errs...))
}
