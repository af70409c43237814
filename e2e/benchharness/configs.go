package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/bulkhead-mesh/bulkhead/envoy"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/shares"
)

// Config names: the four configurations of the issue, then the diagnostic
// one that separates Envoy's access-log cost from the bulkhead's own.
const (
	Floor    = "floor"
	Noop     = "noop-authz"
	Bulkhead = "bulkhead"
	Breaker  = "envoy-breaker"
	NoopALS  = "noop-authz+als"
	Batched  = "bulkhead-batched"
	// Experiments, run only when -configs names them (optIn): what the
	// Check's dynamic metadata costs without an access log; Envoy's
	// OpenTelemetry access logger in place of the gRPC access log,
	// unbuffered and batched; and the access-log filter that logs only the
	// requests holding a permit, against logging every request, with none
	// rejected and with most shed (a bulkhead of 4, no queue).
	NoopMetadata    = "noop-authz+metadata"
	NoopOTel        = "noop-authz+otel"
	NoopOTelBatched = "noop-authz+otel-batched"
	LogAll          = "bulkhead-log-all"
	Shedding        = "bulkhead-shedding"
	SheddingLogAll  = "bulkhead-shedding-log-all"
	// The bulkhead on the shared ledger (ledger.backend: redis), each on a
	// redis-server of its own: one replica, and two behind the same Envoy
	// (envoy.Params.BulkheadReplicas). Compared with Bulkhead, the same
	// daemon on the in-memory ledger through the same bootstrap.
	RedisOne = "bulkhead-redis"
	RedisTwo = "bulkhead-redis-2"
	// RedisOne and RedisTwo with capacity leases (ledger.redis.
	// capacity_leases: true): each replica admits from the permits it
	// leases from Redis, each configuration on a redis-server of its own.
	RedisLeases    = "bulkhead-redis-leases"
	RedisLeasesTwo = "bulkhead-redis-leases-2"
	// The heartbeat phase's configurations, each with a daemon of its own:
	// the shipped configuration with heartbeat leases on (periodic entries
	// on a batched logger of their own) and off, and, to compare, on with
	// the periodic entries on the release logger, unbuffered
	// (envoy.Params.SingleAccessLog).
	HeartbeatOn     = "bulkhead-heartbeat-on"
	HeartbeatSingle = "bulkhead-heartbeat-single-log"
	HeartbeatOff    = "bulkhead-heartbeat-off"
	// With -baseline, Bulkhead and RedisOne again, each right after its
	// twin, with a daemon built from another revision: a change's cost,
	// before and after in one run.
	Baseline         = "bulkhead-baseline"
	RedisOneBaseline = "bulkhead-redis-baseline"
	// Shares (package shares, bulkheads.<name>.shares.mode auto): the
	// shipped bootstrap with the route pair (envoy.Route.Shares), each on a
	// daemon of its own, the limit far above the load (SharesFar: the
	// limit of the others), twice the closed loop's connections
	// (SharesHalf: the closed loop at 50% of the limit) and 5/4 of them
	// (SharesNear: the closed loop at 80% of the limit, where mode auto
	// runs strict permits). See sharesLimit.
	SharesFar  = "bulkhead-shares"
	SharesHalf = "bulkhead-shares-half"
	SharesNear = "bulkhead-shares-near"
	// NearStrict is SharesNear's strict twin: the bulkhead as shipped (no
	// shares) with the same limit. The two run the near phase only
	// (configSpec.near).
	NearStrict = "bulkhead-near-strict"
	// RedisTwoNear and RedisLeasesTwoNear are RedisTwo and RedisLeasesTwo
	// in the near phase, with NearStrict's limit and load: the Redis
	// ledger at the limit, per request and with capacity leases (which
	// shrink there to what each replica uses, the rest decided per
	// request), each on a redis-server of its own.
	RedisTwoNear       = "bulkhead-redis-2-near"
	RedisLeasesTwoNear = "bulkhead-redis-leases-2-near"
	// SharesNoHeartbeat (experiment): SharesFar without the periodic
	// access log (envoy.Params.NoHeartbeat: no access_log_flush_interval,
	// no periodic logger), a daemon of its own with heartbeats off: what
	// the per-stream flush timer costs Envoy on the share route.
	SharesNoHeartbeat = "bulkhead-shares-no-heartbeat"
)

// The sidecars, by what configSpec.sidecar names: the no-op server bare or
// with the bulkhead's metadata, and the daemons (the one of Bulkhead and
// Batched, the heartbeat phase's three, and one per configuration on the
// Redis ledger).
const (
	sidecarNoop               = "noop"
	sidecarNoopMetadata       = "noop-metadata"
	sidecarDaemon             = "daemon"
	sidecarHeartbeatOn        = "daemon-heartbeat-on"
	sidecarHeartbeatSingle    = "daemon-heartbeat-single-log"
	sidecarHeartbeatOff       = "daemon-heartbeat-off"
	sidecarRedisOne           = "daemon-redis"
	sidecarRedisTwo           = "daemon-redis-2"
	sidecarRedisLeases        = "daemon-redis-leases"
	sidecarRedisLeasesTwo     = "daemon-redis-leases-2"
	sidecarShedding           = "daemon-shedding"
	sidecarBaseline           = "daemon-baseline"
	sidecarRedisBaseline      = "daemon-redis-baseline"
	sidecarSharesFar          = "daemon-shares"
	sidecarSharesHalf         = "daemon-shares-half"
	sidecarSharesNear         = "daemon-shares-near"
	sidecarNearStrict         = "daemon-near-strict"
	sidecarRedisTwoNear       = "daemon-redis-2-near"
	sidecarRedisLeasesTwoNear = "daemon-redis-leases-2-near"
	sidecarSharesNoHB         = "daemon-shares-no-heartbeat"
)

// routeName is the upstream cluster, the bulkhead key and the metric label.
const routeName = "bench"

// limit is the bulkhead's max_concurrent and the breaker's max_requests:
// far above the concurrency the load reaches, so that no configuration
// rejects and every one measures its overhead only.
const limit = 1000

// configSpec says how a configuration is built.
type configSpec struct {
	Name    string
	Title   string // one line for the report
	sidecar string // "" or a sidecar* constant: the gRPC server Envoy calls
	// The template's knobs (unused for Bulkhead, rendered by package envoy).
	extAuthz, accessLog bool
	// otel: the access log on Envoy's OpenTelemetry logger (a few
	// formatted attributes) instead of the gRPC access log; otelBuffer its
	// buffer_size_bytes.
	otel        bool
	otelBuffer  int
	maxRequests int
	// batched: the shipped configuration with the access log buffered.
	batched bool
	// noHeartbeat: the shipped configuration without the periodic access
	// log (envoy.Params.NoHeartbeat), for a daemon with heartbeats off.
	noHeartbeat bool
	// singleLog: the shipped configuration with the periodic entries on the
	// release logger, unbuffered (envoy.Params.SingleAccessLog).
	singleLog bool
	// diagnostic configurations are not run at the floor's rates (beyond
	// what any ext_authz configuration carries on a small machine).
	diagnostic bool
	// optIn configurations (experiments) run only when -configs names them.
	optIn bool
	// logAll: the shipped configuration with the release logger logging
	// every request, not only those that hold a permit.
	logAll bool
	// redisReplicas > 0: the daemon on the Redis ledger, that many
	// replicas behind the one Envoy, on a redis-server of the
	// configuration's own. Not run at the floor's rates either.
	redisReplicas int
	// affinity: each Envoy worker keeps one of the replicas
	// (envoy.Params.BulkheadAffinity).
	affinity bool
	// baseline: the daemon is the -baseline binary.
	baseline bool
	// shares: the shipped bootstrap with the route a shares pair
	// (envoy.Route.Shares), for a daemon whose bulkhead is in mode auto.
	shares bool
	// near: the configuration runs the near phase (runNear) instead of the
	// closed and open loops.
	near bool
}

// configSpecs returns the configurations in run order; the floor is first
// because the open-loop rates derive from its maximum.
func configSpecs(diagnostic bool) []configSpec {
	specs := []configSpec{
		{Name: Floor, Title: "Envoy straight to the upstream (no filter, no access log)"},
		{Name: Noop, Title: "Envoy + ext_authz to a no-op server (bare ext_authz hop)", sidecar: sidecarNoop, extAuthz: true},
		{Name: Bulkhead, Title: "Envoy + the bulkhead (ext_authz + gRPC access log, envoy/front-proxy.yaml.tmpl)", sidecar: sidecarDaemon},
		{Name: Breaker, Title: fmt.Sprintf("Envoy's own circuit breaker (cluster max_requests %d)", limit), maxRequests: limit},
		{Name: RedisOne, Title: "the bulkhead on the Redis ledger (ledger.backend: redis, on_unavailable: fail_closed, " +
			"redis-server on loopback, no persistence), one replica; the shipped bootstrap", sidecar: sidecarRedisOne, redisReplicas: 1},
		{Name: RedisLeases, Title: "bulkhead-redis with capacity leases (ledger.redis.capacity_leases: true: the replica admits " +
			"from the permits it leases from Redis), one replica", sidecar: sidecarRedisLeases, redisReplicas: 1},
		{Name: RedisTwo, Title: "the bulkhead on the Redis ledger, two replicas behind the same Envoy (envoy.Params.BulkheadReplicas: " +
			"one cluster, health-checked), one redis-server", sidecar: sidecarRedisTwo, redisReplicas: 2},
		{Name: RedisLeasesTwo, Title: "bulkhead-redis-2 with capacity leases (ledger.redis.capacity_leases: true), two replicas " +
			"behind the same Envoy, each worker on one (envoy.Params.BulkheadAffinity), one redis-server",
			sidecar: sidecarRedisLeasesTwo, redisReplicas: 2, affinity: true},
		{Name: SharesFar, Title: fmt.Sprintf("the bulkhead with shares, mode auto (bulkheads.bench.shares.mode: auto, limit %d, "+
			"shares.* defaults: ttl %v, interval %v): the shipped bootstrap with the route pair (envoy.Route.Shares), a daemon of its own",
			limit, shares.DefaultTTL, shares.DefaultInterval), sidecar: sidecarSharesFar, shares: true},
		{Name: SharesHalf, Title: "bulkhead-shares with the limit at twice the closed loop's connections (the closed loop at 50% of the limit), " +
			"a daemon of its own", sidecar: sidecarSharesHalf, shares: true},
		{Name: SharesNear, Title: fmt.Sprintf("near phase: bulkhead-shares with the limit at the closed loop's connections, each request "+
			"%v at the upstream (the upstream's requests in flight above the switch to strict permits at %.0f%% of the limit), a daemon of its own",
			nearDelay, 100*shares.SwitchToStrict), sidecar: sidecarSharesNear, shares: true, near: true},
		{Name: NearStrict, Title: "near phase: the bulkhead as shipped (strict, no shares) with the same limit and load as bulkhead-shares-near, " +
			"a daemon of its own", sidecar: sidecarNearStrict, near: true},
		{Name: RedisTwoNear, Title: "near phase: bulkhead-redis-2 (per request, two replicas) with the limit and load of bulkhead-near-strict, " +
			"a redis-server of its own", sidecar: sidecarRedisTwoNear, redisReplicas: 2, near: true},
		{Name: RedisLeasesTwoNear, Title: "near phase: bulkhead-redis-leases-2 (capacity leases, two replicas, each worker on one) with the " +
			"limit and load of bulkhead-near-strict, a redis-server of its own",
			sidecar: sidecarRedisLeasesTwoNear, redisReplicas: 2, affinity: true, near: true},
	}
	if diagnostic {
		specs = append(specs, configSpec{Name: Batched,
			Title:   "diagnostic: the bulkhead with the access log batched (buffer_size_bytes 16384, buffer_flush_interval 1ms)",
			sidecar: sidecarDaemon, batched: true, diagnostic: true})
		specs = append(specs, configSpec{Name: NoopALS,
			Title:   "diagnostic: the bulkhead's protocol with a no-op server (ext_authz answering the same metadata + gRPC access log)",
			sidecar: sidecarNoopMetadata, extAuthz: true, accessLog: true, diagnostic: true})
		specs = append(specs,
			configSpec{Name: NoopMetadata, Title: "experiment: ext_authz answering the bulkhead's metadata, no access log",
				sidecar: sidecarNoopMetadata, extAuthz: true, diagnostic: true, optIn: true},
			configSpec{Name: NoopOTel, Title: "experiment: noop-authz+als with Envoy's OpenTelemetry access logger instead " +
				"(six formatted attributes, unbuffered: one unary Export per entry)",
				sidecar: sidecarNoopMetadata, extAuthz: true, otel: true, diagnostic: true, optIn: true},
			configSpec{Name: NoopOTelBatched, Title: "experiment: noop-authz+otel buffered (16 KiB, 1 ms flush)",
				sidecar: sidecarNoopMetadata, extAuthz: true, otel: true, otelBuffer: 16384, diagnostic: true, optIn: true},
			configSpec{Name: LogAll, Title: "experiment: the bulkhead, its release logger logging every request (not only those holding a permit)",
				sidecar: sidecarDaemon, logAll: true, diagnostic: true, optIn: true},
			configSpec{Name: Shedding, Title: "experiment: the bulkhead shedding most requests (max_concurrent 4, no queue), shipped bootstrap",
				sidecar: sidecarShedding, diagnostic: true, optIn: true},
			configSpec{Name: SharesNoHeartbeat, Title: "experiment: bulkhead-shares without the periodic access log " +
				"(envoy.Params.NoHeartbeat; the daemon's leases.heartbeat_interval 0), a daemon of its own",
				sidecar: sidecarSharesNoHB, shares: true, noHeartbeat: true, diagnostic: true, optIn: true},
			configSpec{Name: SheddingLogAll, Title: "experiment: bulkhead-shedding, its release logger logging every request",
				sidecar: sidecarShedding, logAll: true, diagnostic: true, optIn: true},
		)
	}
	return specs
}

// withBaseline adds Baseline after Bulkhead and RedisOneBaseline after
// RedisOne: the same configurations, the daemon the -baseline binary.
func withBaseline(specs []configSpec) []configSpec {
	var out []configSpec
	for _, s := range specs {
		out = append(out, s)
		switch s.Name {
		case Bulkhead:
			b := s
			b.Name, b.Title, b.sidecar, b.baseline = Baseline, s.Title+"; the -baseline daemon", sidecarBaseline, true
			out = append(out, b)
		case RedisOne:
			b := s
			b.Name, b.Title, b.sidecar, b.baseline = RedisOneBaseline, s.Title+"; the -baseline daemon", sidecarRedisBaseline, true
			out = append(out, b)
		}
	}
	return out
}

// knownConfigs checks a -configs list: every name is a configuration of
// the loops (the floor, the diagnostic and opt-in ones and the -baseline
// ones included), so that a misspelt name fails at once rather than
// leaving a run that measures the floor alone.
func knownConfigs(list string) error {
	if list == "" {
		return nil
	}
	var known []string
	for _, s := range withBaseline(configSpecs(true)) {
		known = append(known, s.Name)
	}
	for name := range strings.SplitSeq(list, ",") {
		if !slices.Contains(known, name) {
			return fmt.Errorf("-configs: unknown configuration %q (known: %s)", name, strings.Join(known, ", "))
		}
	}
	return nil
}

// heartbeatSpecs are the heartbeat phase's configurations: on, on with a
// single access logger, then off. All are the shipped bootstrap in front of
// a daemon of their own, so that they differ in the heartbeat setting only
// (Envoy's periodic access log and its logger, the daemon's
// leases.heartbeat_interval).
func heartbeatSpecs() []configSpec {
	return []configSpec{
		{Name: HeartbeatOn, sidecar: sidecarHeartbeatOn, Title: fmt.Sprintf(
			"heartbeat phase: the bulkhead as shipped, heartbeats on (access_log_flush_interval and leases.heartbeat_interval %v; "+
				"periodic entries on a logger of their own, batched every %v), a daemon of its own",
			permit.DefaultHeartbeatInterval, envoy.Params{}.HeartbeatFlushInterval())},
		{Name: HeartbeatSingle, sidecar: sidecarHeartbeatSingle, singleLog: true, Title: fmt.Sprintf(
			"heartbeat phase: heartbeats on (%v) with the periodic entries on the release logger, unbuffered like the end entries "+
				"(envoy.Params.SingleAccessLog: one gRPC message each), a daemon of its own", permit.DefaultHeartbeatInterval)},
		{Name: HeartbeatOff, sidecar: sidecarHeartbeatOff, noHeartbeat: true,
			Title: "heartbeat phase: the bulkhead with heartbeats off (no periodic access log, leases.heartbeat_interval 0), a daemon of its own"},
	}
}

// daemon reports whether spec's sidecar is a bulkhead daemon.
func (spec configSpec) daemon() bool { return strings.HasPrefix(spec.sidecar, sidecarDaemon) }

//go:embed proxy.yaml.tmpl
var proxyTemplate string

var proxy = template.Must(template.New("proxy.yaml.tmpl").
	Funcs(template.FuncMap{"quote": func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	}}).
	Option("missingkey=error").
	Parse(proxyTemplate))

// proxyParams are the inputs of proxy.yaml.tmpl.
type proxyParams struct {
	Name, Cluster       string
	Upstream, Sidecar   envoy.Endpoint
	ExtAuthz, AccessLog bool
	OTel                bool
	OTelBuffer          int
	MaxRequests         int
	// PermitLogFilter is the shipped access-log filter (only requests
	// holding a permit), evaluated as the bulkhead's Envoy does.
	PermitLogFilter string
}

// render returns the Envoy bootstrap of spec: upstream is the test
// upstream, sidecar the gRPC server of spec.sidecar, replicas the further
// daemon replicas of its cluster (spec.redisReplicas > 1).
func (spec configSpec) render(upstream, sidecar envoy.Endpoint, replicas ...envoy.Endpoint) ([]byte, error) {
	if spec.daemon() {
		// The shipped configuration, exactly as users run it.
		b, err := envoy.Render(envoy.Params{
			ListenerPort: 0, AdminPort: 0, Bulkhead: sidecar, BulkheadReplicas: replicas, BulkheadAffinity: spec.affinity,
			NoHeartbeat: spec.noHeartbeat, SingleAccessLog: spec.singleLog,
			Routes: []envoy.Route{{Name: routeName, Prefix: "/", Upstream: upstream, Shares: spec.shares}},
		})
		if err != nil {
			return nil, err
		}
		if spec.logAll {
			// The same filter, evaluated as shipped, but matching requests
			// without a permit too: only the entries logged differ.
			const only, all = "match_if_key_not_found: false}", "match_if_key_not_found: true}"
			if !bytes.Contains(b, []byte(only)) {
				return nil, fmt.Errorf("render %s: no %q in the shipped configuration", spec.Name, only)
			}
			b = bytes.Replace(b, []byte(only), []byte(all), 1)
		}
		if !spec.batched {
			return b, nil
		}
		const unbuffered = "buffer_size_bytes: 0\n"
		if bytes.Count(b, []byte(unbuffered)) != 1 {
			return nil, fmt.Errorf("render %s: want one %q in the shipped configuration", spec.Name, unbuffered)
		}
		i := bytes.Index(b, []byte(unbuffered))
		indent := b[bytes.LastIndexByte(b[:i], '\n')+1 : i]
		batched := fmt.Sprintf("buffer_size_bytes: 16384\n%sbuffer_flush_interval: 0.001s\n", indent)
		return bytes.Replace(b, []byte(unbuffered), []byte(batched), 1), nil
	}
	p := proxyParams{Name: spec.Name, Cluster: routeName, Upstream: upstream,
		ExtAuthz: spec.extAuthz, AccessLog: spec.accessLog, OTel: spec.otel, OTelBuffer: spec.otelBuffer,
		MaxRequests: spec.maxRequests, PermitLogFilter: envoy.Params{}.PermitLogFilter(false)}
	if spec.sidecar != "" {
		p.Sidecar = sidecar
	}
	var buf bytes.Buffer
	if err := proxy.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("render %s: %w", spec.Name, err)
	}
	return buf.Bytes(), nil
}

// sharesLimit is the limit of the bulkhead of a shares sidecar (and of
// the near phase's other sidecars: SharesNear's strict twin and the Redis
// ledger's), for a closed loop of conns connections; 0 for the other
// sidecars.
func sharesLimit(sidecar string, conns int) int {
	switch sidecar {
	case sidecarSharesFar, sidecarSharesNoHB:
		return limit
	case sidecarSharesHalf:
		return 2 * conns
	case sidecarSharesNear, sidecarNearStrict, sidecarRedisTwoNear, sidecarRedisLeasesTwoNear:
		return conns
	}
	return 0
}

// daemonConfig is the configuration of the daemon that sidecar names: the
// shipped defaults for sidecarDaemon; the heartbeat phase's daemons set
// leases.heartbeat_interval, to Envoy's default interval or to 0 (off);
// with redisAddr, the ledger on that Redis (its default timeout, failing
// closed: a Redis that does not answer shows as rejections, not as speed),
// with capacity leases for the sidecars of RedisLeases, RedisLeasesTwo and
// RedisLeasesTwoNear, the near phase's at its limit (sharesLimit);
// the shares sidecars' bulkhead in mode auto with its limit (sharesLimit)
// for a closed loop of conns connections, the shares settings the defaults.
func daemonConfig(sidecar, redisAddr string, conns int) string {
	extra := ""
	switch sidecar {
	case sidecarHeartbeatOn, sidecarHeartbeatSingle:
		extra = fmt.Sprintf("leases: {heartbeat_interval: %v}\n", permit.DefaultHeartbeatInterval)
	case sidecarHeartbeatOff:
		extra = "leases: {heartbeat_interval: 0s}\n"
	case sidecarShedding:
		return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: info}
bulkheads:
  %s: {max_concurrent: 4, max_queue: 0}
`, routeName)
	case sidecarSharesFar, sidecarSharesHalf, sidecarSharesNear, sidecarNearStrict, sidecarSharesNoHB:
		l, mode := sharesLimit(sidecar, conns), "auto"
		if sidecar == sidecarNearStrict {
			mode = "strict"
		}
		if sidecar == sidecarSharesNoHB {
			extra = "leases: {heartbeat_interval: 0s}\n"
		}
		return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: info}
%sbulkheads:
  %s: {max_concurrent: %d, max_queue: %d, max_wait: 500ms, shares: {mode: %s}}
`, extra, routeName, l, l, mode)
	}
	l := limit
	if redisAddr != "" {
		// Capacity leases are the default: the per-request
		// configurations say false.
		leases := ", capacity_leases: false"
		switch sidecar {
		case sidecarRedisLeases, sidecarRedisLeasesTwo, sidecarRedisLeasesTwoNear:
			leases = ", capacity_leases: true"
		}
		extra += fmt.Sprintf("ledger: {backend: redis, on_unavailable: fail_closed, redis: {address: %q%s}}\n", redisAddr, leases)
		if near := sharesLimit(sidecar, conns); near > 0 {
			l = near
		}
	}
	return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: info}
%sbulkheads:
  %s: {max_concurrent: %d, max_queue: %d, max_wait: 500ms}
`, extra, routeName, l, l)
}
