package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// Defaults of the settings outside bulkheads.
const (
	DefaultListenGRPC      = "127.0.0.1:9001"
	DefaultListenHTTP      = "127.0.0.1:9090"
	DefaultListenAdmin     = "127.0.0.1:9091"
	DefaultPriorityHeader  = "x-bulkhead-priority"
	DefaultDenyStatus      = 503
	DefaultDeadlineMargin  = 25 * time.Millisecond
	DefaultRetryAfter      = time.Second
	DefaultLeaseTTL        = 60 * time.Second
	DefaultSweepInterval   = 500 * time.Millisecond
	DefaultNodeGrace       = 5 * time.Second
	DefaultMaxRouteTTL     = 10 * time.Minute
	DefaultMaxConnAgeGrace = 10 * time.Second
	minMaxConnAge          = time.Second
	DefaultMaxBulkheads    = 1000
	MaxBulkheadsCeiling    = 100000 // limits.max_bulkheads may not exceed it
	DefaultMaxTenants      = 1000
	MaxTenantsCeiling      = 1000000 // limits.max_tenants may not exceed it
	maxDeadlineMarginLimit = time.Second

	DefaultGRPCMaxRecvBytes         = 4 << 20
	MinGRPCMaxRecvBytes             = 64 << 10 // a CheckRequest carries every request header
	MaxGRPCMaxRecvBytes             = 64 << 20
	DefaultGRPCMaxConcurrentStreams = 10000
	MinGRPCMaxConcurrentStreams     = 100 // waiting Checks are streams: a low bound fails them
	MaxGRPCMaxConcurrentStreams     = 1 << 20
	DefaultMaxPermits               = 1_000_000
	MaxPermitsCeiling               = 100_000_000 // leases.max_permits may not exceed it
)

// scalar is one setting outside bulkheads: its dotted key (also its env
// name, BULKHEAD_ + upper-cased key with "_" for "."), its default in the form
// YAML gives it, the flag that overrides it, and how to store it in a Config.
type scalar struct {
	key  string
	def  any
	flag string
	set  func(d *decoder, c *Config, key string, raw any)
}

// scalars lists every setting outside bulkheads. Read-only.
var scalars = []scalar{
	{"listen.grpc", DefaultListenGRPC, FlagListenGRPC, func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPC = d.str(k, v)
	}},
	{"listen.http", DefaultListenHTTP, FlagListenHTTP, func(d *decoder, c *Config, k string, v any) {
		c.Listen.HTTP = d.str(k, v)
	}},
	{"listen.admin", DefaultListenAdmin, FlagListenAdmin, func(d *decoder, c *Config, k string, v any) {
		c.Listen.Admin = d.str(k, v)
	}},
	{"listen.grpc_max_connection_age", "0s", "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCMaxConnectionAge = d.duration(k, v)
	}},
	{"listen.grpc_max_connection_age_grace", DefaultMaxConnAgeGrace.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCMaxConnectionAgeGrace = d.duration(k, v)
	}},
	{"listen.grpc_max_recv_bytes", DefaultGRPCMaxRecvBytes, "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCMaxRecvBytes = d.integer(k, v)
	}},
	{"listen.grpc_max_concurrent_streams", DefaultGRPCMaxConcurrentStreams, "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCMaxConcurrentStreams = d.integer(k, v)
	}},
	{"listen.grpc_tls.cert_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCTLS.CertFile = d.str(k, v)
	}},
	{"listen.grpc_tls.key_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCTLS.KeyFile = d.str(k, v)
	}},
	{"listen.grpc_tls.client_ca_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Listen.GRPCTLS.ClientCAFile = d.str(k, v)
	}},
	{"log.level", "info", FlagLogLevel, func(d *decoder, c *Config, k string, v any) {
		if s, ok := d.strOK(k, v); ok {
			l, err := ParseLogLevel(s)
			d.check(k, v, err == nil, "must be debug, info, warn or error")
			c.Log.Level = l
		}
	}},
	{"log.format", "text", FlagLogFormat, func(d *decoder, c *Config, k string, v any) {
		if s, ok := d.strOK(k, v); ok {
			f, err := ParseLogFormat(s)
			d.check(k, v, err == nil, "must be text or json")
			c.Log.Format = f
		}
	}},
	{"authz.priority_header", DefaultPriorityHeader, "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.PriorityHeader = d.str(k, v)
	}},
	{"authz.default_priority", "normal", "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.DefaultPriority = bulkhead.Normal
		if s, ok := d.strOK(k, v); ok {
			p, err := bulkhead.ParsePriority(s)
			d.check(k, v, err == nil, "must be critical, normal or best_effort")
			c.Authz.DefaultPriority = p
		}
	}},
	{"authz.unknown_bulkhead", "deny", "", func(d *decoder, c *Config, k string, v any) {
		if s, ok := d.strOK(k, v); ok {
			p, err := authz.ParseUnmatchedPolicy(s)
			d.check(k, v, err == nil, "must be deny, allow or default")
			c.Authz.UnknownBulkhead = p
		}
	}},
	{"authz.default_bulkhead", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.DefaultBulkhead = d.str(k, v)
	}},
	{"authz.deny_status", DefaultDenyStatus, "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.DenyStatus = d.integer(k, v)
	}},
	{"authz.deadline_margin", DefaultDeadlineMargin.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.DeadlineMargin = d.duration(k, v)
	}},
	{"authz.retry_after", DefaultRetryAfter.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.RetryAfter = d.duration(k, v)
	}},
	{"authz.tenant_header", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.TenantHeader = d.str(k, v)
	}},
	{"authz.trusted_priority_sources", []any{}, "", func(d *decoder, c *Config, k string, v any) {
		c.Authz.TrustedPrioritySources = d.prefixes(k, v)
	}},
	{"leases.default_ttl", DefaultLeaseTTL.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Leases.DefaultTTL = d.duration(k, v)
	}},
	{"leases.sweep_interval", DefaultSweepInterval.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Leases.SweepInterval = d.duration(k, v)
	}},
	{"leases.node_grace", DefaultNodeGrace.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Leases.NodeGrace = d.duration(k, v)
	}},
	{"leases.max_route_ttl", DefaultMaxRouteTTL.String(), "", func(d *decoder, c *Config, k string, v any) {
		c.Leases.MaxRouteTTL = d.duration(k, v)
	}},
	{"leases.max_permits", DefaultMaxPermits, "", func(d *decoder, c *Config, k string, v any) {
		c.Leases.MaxPermits = d.integer(k, v)
	}},
	{"limits.max_bulkheads", DefaultMaxBulkheads, "", func(d *decoder, c *Config, k string, v any) {
		c.Limits.MaxBulkheads = d.integer(k, v)
	}},
	{"limits.max_tenants", DefaultMaxTenants, "", func(d *decoder, c *Config, k string, v any) {
		c.Limits.MaxTenants = d.integer(k, v)
	}},
	{"admin.token_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Admin.TokenFile = d.str(k, v)
	}},
	{"admin.tls.cert_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Admin.TLS.CertFile = d.str(k, v)
	}},
	{"admin.tls.key_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Admin.TLS.KeyFile = d.str(k, v)
	}},
	{"admin.tls.client_ca_file", "", "", func(d *decoder, c *Config, k string, v any) {
		c.Admin.TLS.ClientCAFile = d.str(k, v)
	}},
}

// envName is the environment variable overriding key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// decoder turns raw values (from YAML, env, flags or defaults) into typed
// fields, recording a Problem for each value of the wrong type.
type decoder struct {
	ps problems
	// origin maps a key to where its effective value came from when that
	// was an env variable or a flag; absent means the file or a default.
	origin map[string]string
	// checkFiles makes validate read the files the configuration names
	// (admin token and TLS files): Load does, Parse does not.
	checkFiles bool
}

// got formats v for a problem about key, naming its origin if not the file.
func (d *decoder) got(key string, v any) string {
	if o := d.origin[key]; o != "" {
		return show(v) + " from " + o
	}
	return show(v)
}

// check records a problem "key: reason" unless ok.
func (d *decoder) check(key string, v any, ok bool, reason string) {
	if !ok {
		d.ps.add(key, reason, d.got(key, v))
	}
}

func (d *decoder) strOK(key string, v any) (string, bool) {
	s, ok := v.(string)
	d.check(key, v, ok, "must be a string")
	return s, ok
}

func (d *decoder) str(key string, v any) string {
	s, _ := d.strOK(key, v)
	return s
}

// integer accepts YAML integers and decimal strings (as env and flags give).
func (d *decoder) integer(key string, v any) int {
	var n int64
	ok := true
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case uint64:
		n = int64(min(v, math.MaxInt64))
	case string:
		var err error
		n, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		ok = err == nil || errors.Is(err, strconv.ErrRange)
	default:
		ok = false
	}
	if ok && (n > math.MaxInt32 || n < math.MinInt32) {
		d.ps.add(key, "is out of range", d.got(key, v))
		return 0
	}
	d.check(key, v, ok, "must be an integer")
	if !ok {
		return 0
	}
	return int(n)
}

// float accepts YAML numbers and decimal strings.
func (d *decoder) float(key string, v any) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return f
		}
	}
	d.check(key, v, false, "must be a number")
	return 0
}

// duration accepts Go duration strings ("500ms") and a plain 0. A bare
// non-zero number is refused: its unit would be a guess.
func (d *decoder) duration(key string, v any) time.Duration {
	switch v := v.(type) {
	case time.Duration:
		return v
	case int:
		if v == 0 {
			return 0
		}
	case string:
		if t, err := time.ParseDuration(strings.TrimSpace(v)); err == nil {
			return t
		}
	}
	d.check(key, v, false, `must be a duration with a unit, like "500ms" or "1m30s"`)
	return 0
}

// prefixes accepts a YAML list of CIDR prefixes, or one string of them
// separated by commas (as an environment variable gives). Each must be a
// canonical prefix ("10.0.0.0/8"; one address is "127.0.0.1/32"). An empty
// list is nil.
func (d *decoder) prefixes(key string, v any) []netip.Prefix {
	var items []any
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		items = v
	case []string:
		for _, s := range v {
			items = append(items, s)
		}
	case string:
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	default:
		d.check(key, v, false, `must be a list of CIDR prefixes, like ["127.0.0.0/8", "10.0.0.0/8"]`)
		return nil
	}
	var out []netip.Prefix
	for i, item := range items {
		ik := fmt.Sprintf("%s[%d]", key, i)
		s, ok := item.(string)
		if !ok {
			d.ps.add(ik, "must be a CIDR prefix string, like \"10.0.0.0/8\"", d.got(key, item))
			continue
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		switch {
		case err != nil:
			reason := `must be a CIDR prefix, like "10.0.0.0/8"`
			if a, aerr := netip.ParseAddr(strings.TrimSpace(s)); aerr == nil {
				reason += fmt.Sprintf(" (one address: %q)", netip.PrefixFrom(a, a.BitLen()).String())
			}
			d.ps.add(ik, reason, d.got(key, item))
		case p != p.Masked():
			d.ps.add(ik, fmt.Sprintf("has bits set beyond its prefix length (did you mean %q?)", p.Masked().String()), d.got(key, item))
		default:
			out = append(out, p)
		}
	}
	return out
}

// unknownField returns the problem reason for an unknown field among known.
func unknownField(name string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return fmt.Sprintf("unknown field (field names are lowercase: %s)", k)
		}
	}
	return "unknown field (known: " + strings.Join(known, ", ") + ")"
}
