package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// keyGRPCTLS is the field path of the gRPC listener's TLS section.
const keyGRPCTLS = "listen.grpc_tls"

// validate checks the rules that span fields or need a range, after every
// value has been decoded. Fields already reported are not checked again.
func (d *decoder) validate(c *Config) {
	d.address("listen.grpc", c.Listen.GRPC)
	d.address("listen.http", c.Listen.HTTP)
	d.address("listen.admin", c.Listen.Admin)
	d.distinct("listen.http", c.Listen.HTTP, "listen.grpc", c.Listen.GRPC)
	d.distinct("listen.admin", c.Listen.Admin, "listen.grpc", c.Listen.GRPC)
	d.distinct("listen.admin", c.Listen.Admin, "listen.http", c.Listen.HTTP)
	age := c.Listen.GRPCMaxConnectionAge
	d.rule("listen.grpc_max_connection_age", age, age == 0 || age >= minMaxConnAge, "must be 0 (off) or at least 1s")
	d.rule("listen.grpc_max_connection_age_grace", c.Listen.GRPCMaxConnectionAgeGrace,
		c.Listen.GRPCMaxConnectionAgeGrace > 0, "must be positive")
	d.rule("listen.grpc_max_recv_bytes", c.Listen.GRPCMaxRecvBytes,
		c.Listen.GRPCMaxRecvBytes >= MinGRPCMaxRecvBytes && c.Listen.GRPCMaxRecvBytes <= MaxGRPCMaxRecvBytes,
		fmt.Sprintf("must be in %d..%d (bytes)", MinGRPCMaxRecvBytes, MaxGRPCMaxRecvBytes))
	d.rule("listen.grpc_max_concurrent_streams", c.Listen.GRPCMaxConcurrentStreams,
		c.Listen.GRPCMaxConcurrentStreams >= MinGRPCMaxConcurrentStreams && c.Listen.GRPCMaxConcurrentStreams <= MaxGRPCMaxConcurrentStreams,
		fmt.Sprintf("must be in %d..%d (each waiting Check is a stream)", MinGRPCMaxConcurrentStreams, MaxGRPCMaxConcurrentStreams))
	d.tlsPairing(keyGRPCTLS, c.Listen.GRPCTLS)
	if d.checkFiles {
		d.tlsContents(keyGRPCTLS, c.Listen.GRPCTLS)
	}

	a := &c.Authz
	d.header("authz.priority_header", a.PriorityHeader, "ignore headers")
	d.header("authz.tenant_header", a.TenantHeader, "turn tenants off")
	if a.TenantHeader != "" && a.TenantHeader == a.PriorityHeader {
		d.rule("authz.tenant_header", a.TenantHeader, false, "must differ from authz.priority_header")
	}
	d.rule("authz.deny_status", a.DenyStatus, a.DenyStatus >= 400 && a.DenyStatus <= 599, "must be in 400..599")
	d.rule("authz.deadline_margin", a.DeadlineMargin,
		a.DeadlineMargin >= 0 && a.DeadlineMargin < maxDeadlineMarginLimit, "must be at least 0 and less than 1s")
	d.rule("authz.retry_after", a.RetryAfter, a.RetryAfter > 0, "must be positive")
	d.defaultBulkhead(c)
	d.ledger(c)

	d.rule("leases.default_ttl", c.Leases.DefaultTTL, c.Leases.DefaultTTL > 0, "must be positive")
	d.rule("leases.sweep_interval", c.Leases.SweepInterval, c.Leases.SweepInterval > 0, "must be positive")
	d.rule("leases.heartbeat_interval", c.Leases.HeartbeatInterval,
		c.Leases.HeartbeatInterval == 0 || c.Leases.HeartbeatInterval >= minHeartbeatInterval,
		"must be 0 (heartbeat leases off) or at least "+minHeartbeatInterval.String())
	d.rule("leases.heartbeat_ttl", c.Leases.HeartbeatTTL,
		c.Leases.HeartbeatInterval == 0 || c.Leases.HeartbeatTTL >= 2*c.Leases.HeartbeatInterval,
		"must be at least twice leases.heartbeat_interval, so that one late periodic entry never ends a running request's permit")
	d.rule("leases.recovery_window", c.Leases.RecoveryWindow,
		c.Leases.HeartbeatInterval == 0 || c.Leases.RecoveryWindow == 0 ||
			(c.Leases.RecoveryWindow >= c.Leases.HeartbeatInterval*5/4 && c.Leases.RecoveryWindow <= c.Leases.HeartbeatTTL),
		"must be 0 (admit at once after a start) or between 1.25 x leases.heartbeat_interval "+
			"(an interval and the heartbeat log's flush, a quarter interval) and leases.heartbeat_ttl")
	d.rule("leases.max_route_ttl", c.Leases.MaxRouteTTL, c.Leases.MaxRouteTTL > 0, "must be positive")
	d.rule("leases.max_permits", c.Leases.MaxPermits, c.Leases.MaxPermits >= 1 && c.Leases.MaxPermits <= MaxPermitsCeiling,
		fmt.Sprintf("must be in 1..%d", MaxPermitsCeiling))

	maxB := c.Limits.MaxBulkheads
	d.rule("limits.max_bulkheads", maxB, maxB >= 1 && maxB <= MaxBulkheadsCeiling,
		fmt.Sprintf("must be in 1..%d", MaxBulkheadsCeiling))
	if !d.ps.bad["limits.max_bulkheads"] && len(c.Bulkheads) > maxB {
		d.ps.add("bulkheads", fmt.Sprintf("at most limits.max_bulkheads (%d) bulkheads may be configured", maxB),
			fmt.Sprintf("%d bulkheads", len(c.Bulkheads)))
	}
	maxT := c.Limits.MaxTenants
	d.rule("limits.max_tenants", maxT, maxT >= 1 && maxT <= MaxTenantsCeiling,
		fmt.Sprintf("must be in 1..%d", MaxTenantsCeiling))
	if a.TenantHeader == "" && !d.ps.bad["authz.tenant_header"] {
		for name, b := range c.Bulkheads {
			if b.Tenant != nil {
				d.ps.add("bulkheads."+name+".tenant", "tenant template has no effect: set authz.tenant_header", "")
			}
		}
	}
	d.connectionBulkheads(c)
	d.sharesRules(c)
	d.admin(c)
}

// distinct records a problem at key unless addr differs from other's
// address otherAddr or uses port 0. Addresses already reported are skipped.
func (d *decoder) distinct(key, addr, other, otherAddr string) {
	if addr != otherAddr || d.ps.bad[key] || d.ps.bad[other] {
		return
	}
	if _, port, _ := net.SplitHostPort(addr); port != "0" {
		d.ps.add(key, "must differ from "+other, d.got(key, addr))
	}
}

// header checks that h, unless "", is a lowercase HTTP header name; off says
// what "" does.
func (d *decoder) header(key, h, off string) {
	if h == "" || d.ps.bad[key] {
		return
	}
	switch {
	case !isToken(h):
		d.ps.add(key, `must be an HTTP header name, or "" to `+off, d.got(key, h))
	case strings.ToLower(h) != h:
		d.ps.add(key, "must be lowercase, as Envoy passes header names", d.got(key, h))
	}
}

// rule records a problem at key, showing value v, unless ok or the key was
// already reported.
func (d *decoder) rule(key string, v any, ok bool, reason string) {
	if !ok && !d.ps.bad[key] {
		d.ps.add(key, reason, d.got(key, v))
	}
}

// defaultBulkhead checks authz.default_bulkhead against the policy.
func (d *decoder) defaultBulkhead(c *Config) {
	const key = "authz.default_bulkhead"
	a := &c.Authz
	if d.ps.bad[key] || d.ps.bad["authz.unknown_bulkhead"] {
		return
	}
	switch {
	case a.Unmatched == authz.UseDefault && a.DefaultBulkhead == "":
		d.ps.add(key, "is required when authz.unknown_bulkhead is default", "")
	case a.Unmatched != authz.UseDefault && a.DefaultBulkhead != "":
		d.ps.add(key, "must be empty unless authz.unknown_bulkhead is default", d.got(key, a.DefaultBulkhead))
	case a.DefaultBulkhead != "":
		if _, ok := c.Bulkheads[a.DefaultBulkhead]; !ok {
			d.ps.add(key, "must name a configured bulkhead", d.got(key, a.DefaultBulkhead))
		}
	}
}

// address checks that s is host:port with a numeric port (0 allowed).
func (d *decoder) address(key, s string) {
	if d.ps.bad[key] {
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			err = perr
		}
	}
	if err != nil {
		d.ps.add(key, `must be host:port with a numeric port, like "127.0.0.1:9001" (port 0 picks a free one)`, d.got(key, s))
	}
}

// isToken reports whether s is an RFC 9110 token (a valid header name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return s != ""
}

// settings checks one bulkhead's limiter settings with
// bulkhead.Settings.Validate, re-prefixing each problem's field with path.
// Fields already reported (missing or of the wrong type) are skipped.
func (d *decoder) settings(path string, b Bulkhead) {
	d.fieldProblems(path, b.Settings.Validate(), func(field string) bool {
		return field == "reserve" && d.anyBad(path+".reserve.", path+".max_concurrent")
	})
}

// fieldProblems records each leaf of err, a "field: reason, got value"
// problem of the settings at path, under path.field, unless that key was
// already reported or skip says to leave it out.
func (d *decoder) fieldProblems(path string, err error, skip func(field string) bool) {
	if err == nil {
		return
	}
	for _, leaf := range leaves(err) {
		msg := leaf.Error()
		field, rest, ok := strings.Cut(msg, ": ")
		if !ok || strings.ContainsAny(field, " ") {
			d.ps.add(path, msg, "") // not "field: reason": keep it whole
			continue
		}
		key := path + "." + field
		if d.ps.bad[key] || skip(field) {
			continue
		}
		reason, got := rest, ""
		if i := strings.LastIndex(rest, ", got "); i >= 0 {
			reason, got = rest[:i], rest[i+len(", got "):]
		}
		d.ps.add(key, reason, got)
	}
}

// anyBad reports whether a field equal to, or under, any prefix was reported.
func (d *decoder) anyBad(prefixes ...string) bool {
	for k := range d.ps.bad {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

// leaves flattens a tree of wrapped and joined errors into its leaves,
// leaving out the bulkhead.ErrInvalidSettings sentinel.
func leaves(err error) []error {
	if err == bulkhead.ErrInvalidSettings { // the sentinel itself, not what wraps it
		return nil
	}
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range m.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}
