package config

import (
	"errors"
	"strings"
	"testing"
)

// nonLoopback is the reason a non-loopback admin listener is refused.
const nonLoopback = "binding to a non-loopback address requires admin.token_file, BULKHEAD_ADMIN_TOKEN or admin.tls.client_ca_file"

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	const th = "authz: {tenant_header: x-t}\n"
	tests := []struct {
		name string
		yaml string
		want string // a whole line of the error, less the "bulkhead.yaml: " prefix
	}{
		// structure and field names
		{"top level is a list", "- a\n", `must be a mapping (got a list)`},
		{"top level is a scalar", "hello\n", `must be a mapping (got "hello")`},
		{"unknown section", "listn: {}\n", "listn: unknown field (known: listen, log, authz, leases, limits, ledger, shares, admin, bulkheads)"},
		{"capitalised section", "Listen: {grpc: 127.0.0.1:1}\n", "Listen: unknown field (field names are lowercase: listen)"},
		{"unknown scalar field", "authz: {deny_stauts: 429}\n", "authz.deny_stauts: unknown field"},
		{"section not a mapping", "listen: 127.0.0.1:9001\n", `listen: must be a mapping (got "127.0.0.1:9001")`},
		{"bulkheads is a list", "bulkheads: [catalog]\n", "bulkheads: must be a mapping (got a list)"},
		{"bulkhead is a list", "bulkheads: {catalog: [1]}\n", "bulkheads.catalog: must be a mapping (got a list)"},
		{"reserve is a scalar", "bulkheads: {c: {max_concurrent: 2, reserve: 0.5}}\n", "bulkheads.c.reserve: must be a mapping (got 0.5)"},
		{"typo in bulkhead field", "bulkheads: {c: {max_concurrent: 1, max_concurent: 3}}\n",
			"bulkheads.c.max_concurent: unknown field (known: max_concurrent, max_queue, max_wait, lease_ttl, reserve, enforce, queue, codel, circuit_breaker, tenant, connections, shares)"},
		// shares
		{"unknown shares mode", "bulkheads: {c: {max_concurrent: 1, shares: {mode: always}}}\n",
			`bulkheads.c.shares.mode: must be strict, shares or auto (got "always")`},
		{"unknown shares field", "bulkheads: {c: {max_concurrent: 1, shares: {mode: auto, clustr: x}}}\n",
			`bulkheads.c.shares.clustr: unknown field (known: mode, cluster)`},
		{"shares of a dry run", "bulkheads: {c: {max_concurrent: 1, enforce: false, shares: {mode: auto}}}\n",
			`bulkheads.c.shares.mode: a dry run (enforce: false) admits everyone: it hands out no shares; use mode strict (got auto)`},
		{"one share cluster for two bulkheads", "bulkheads: {a: {max_concurrent: 1, shares: {mode: auto, cluster: x}}, b: {max_concurrent: 1, shares: {mode: shares, cluster: x}}}\n",
			`bulkheads.b.shares.cluster: cluster "x" is already bulkheads.a's share cluster`},
		{"shares on the Redis ledger without capacity leases", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379, capacity_leases: false}}\nbulkheads: {c: {max_concurrent: 1, shares: {mode: auto}}}\n",
			`bulkheads.c.shares.mode: shares on the Redis ledger are held from capacity leases: set ledger.redis.capacity_leases: true, or use mode strict (got auto)`},
		{"shares ttl under two intervals", "shares: {ttl: 1s, interval: 1s}\n",
			`shares.ttl: must be at least twice shares.interval and at most 10m0s: an Envoy drops its shares when it hears nothing for this long (got 1s)`},
		{"unknown queue discipline", "bulkheads: {c: {max_concurrent: 1, queue: lifo}}\n",
			`bulkheads.c.queue: must be fifo or codel (got "lifo")`},
		{"codel settings with fifo", "bulkheads: {c: {max_concurrent: 1, codel: {target: 1ms}}}\n",
			`bulkheads.c.codel: only with queue codel (got target 1ms, interval 100ms)`},
		{"codel target not below interval", "bulkheads: {c: {max_concurrent: 1, queue: codel, codel: {target: 1s, interval: 1s}}}\n",
			`bulkheads.c.codel.interval: must be positive and above codel.target (got 1s)`},
		{"unknown codel field", "bulkheads: {c: {max_concurrent: 1, queue: codel, codel: {targt: 1ms}}}\n",
			`bulkheads.c.codel.targt: unknown field (known: target, interval)`},
		{"breaker ratio out of range", "bulkheads: {c: {max_concurrent: 1, circuit_breaker: {failure_ratio: 2}}}\n",
			`bulkheads.c.circuit_breaker.failure_ratio: must be in (0, 1] (got 2)`},
		{"breaker unknown field", "bulkheads: {c: {max_concurrent: 1, circuit_breaker: {open: 1s}}}\n",
			`bulkheads.c.circuit_breaker.open: unknown field (known: failure_ratio, min_requests, window, open_for, half_open_probes, slow_call_duration)`},
		{"breaker bad duration", "bulkheads: {c: {max_concurrent: 1, circuit_breaker: {window: 10}}}\n",
			`bulkheads.c.circuit_breaker.window: must be a duration with a unit`},
		{"enforce not a boolean", "bulkheads: {c: {max_concurrent: 1, enforce: off}}\n",
			`bulkheads.c.enforce: must be true or false (got "off")`},
		{"capitalised bulkhead field", "bulkheads: {c: {max_concurrent: 1, Max_Queue: 3}}\n",
			"bulkheads.c.Max_Queue: unknown field (field names are lowercase: max_queue)"},
		{"unknown reserve class", "bulkheads: {c: {max_concurrent: 1, reserve: {best_effort: 0.1}}}\n",
			"bulkheads.c.reserve.best_effort: unknown field (known: critical, normal)"},
		{"newline in a key", "\"a\\nb\": 1\n", `"a\nb": unknown field`},
		{"several documents", "limits: {}\n---\nlimits: {}\n", "must hold one YAML document, not several"},

		// the ledger
		{"unknown backend", "ledger: {backend: etcd}\n", `ledger.backend: must be memory or redis (got "etcd")`},
		{"unknown policy", "ledger: {on_unavailable: retry}\n", `ledger.on_unavailable: must be fail_closed or fail_open ` +
			`(local_share, deprecated, is read as ledger.redis.capacity_leases: true with fail_closed) (got "retry")`},
		{"redis without address", "ledger: {backend: redis}\n",
			`ledger.redis.address: must be set (host:port) when ledger.backend is redis, unless ledger.redis.sentinel is (got "")`},
		{"redis address and sentinel", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379, sentinel: {master: m, addresses: [127.0.0.1:26379]}}}\n",
			`ledger.redis.address: must be empty when ledger.redis.sentinel is set (one or the other) (got "127.0.0.1:6379")`},
		{"sentinel without master", "ledger: {backend: redis, redis: {sentinel: {addresses: [127.0.0.1:26379]}}}\n",
			`ledger.redis.sentinel.master: must name the master when ledger.redis.sentinel.addresses is set (got "")`},
		{"redis prefix with a brace", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379, key_prefix: \"a{b\"}}\n",
			`ledger.redis.key_prefix: must not contain '{', '}' or a newline (a bulkhead's keys share the hash tag {name}) (got "a{b")`},
		{"redis timeout zero", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379, timeout: 0s}}\n",
			`ledger.redis.timeout: must be positive and at most 10s (a Check waits for it) (got 0s)`},
		{"local share without capacity leases", "ledger: {backend: redis, on_unavailable: local_share, redis: {address: 127.0.0.1:6379, capacity_leases: false}}\n",
			`ledger.on_unavailable: must not be local_share with ledger.redis.capacity_leases false: local_share is now capacity leases ` +
				`(a replica cut off from Redis admits within the lease it holds, until the lease's end); write capacity_leases: true ` +
				`with on_unavailable fail_closed (or fail_open), or keep capacity_leases: false with fail_closed or fail_open (got "local_share")`},
		{"capacity leases in memory", "ledger: {redis: {capacity_leases: true}}\n",
			`ledger.redis.capacity_leases: must be false unless ledger.backend is redis (capacity is leased from the shared ledger) (got true)`},
		{"redis tls bool", "ledger: {redis: {tls: {enabled: maybe}}}\n", `ledger.redis.tls.enabled: must be true or false (got "maybe")`},
		{"redis and a dry run", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379}}\nbulkheads: {catalog: {max_concurrent: 1, enforce: false}}\n",
			`bulkheads.catalog.enforce: must be true with ledger.backend redis (a dry run is not available on the shared ledger) (got false)`},
		{"redis and codel", "ledger: {backend: redis, redis: {address: 127.0.0.1:6379}}\nbulkheads: {catalog: {max_concurrent: 1, queue: codel}}\n",
			`bulkheads.catalog.queue: must be fifo with ledger.backend redis (the shared ledger's queues are FIFO) (got "codel")`},

		// bulkhead names
		{"uppercase name", "bulkheads: {Catalog: {max_concurrent: 1}}\n",
			`bulkheads.Catalog: bulkhead names are case-sensitive and must be lowercase, matching ` + NamePattern + ` (got "Catalog")`},
		{"name too long", "bulkheads: {" + strings.Repeat("a", 64) + ": {max_concurrent: 1}}\n",
			"bulkheads." + strings.Repeat("a", 64) + ": bulkhead name must match " + NamePattern},
		{"name starts with a dash", "bulkheads: {-x: {max_concurrent: 1}}\n", `bulkheads.-x: bulkhead name must match ` + NamePattern + ` (got "-x")`},
		{"name ends with a dot", "bulkheads: {x.: {max_concurrent: 1}}\n", `bulkheads.x.: bulkhead name must match`},
		{"name with viper's delimiter", "bulkheads: {a::b: {max_concurrent: 1}}\n", `bulkheads.a::b: bulkhead name must match`},
		{"empty name", "bulkheads: {\"\": {max_concurrent: 1}}\n", `bulkheads.: bulkhead name must match ` + NamePattern + ` (got "")`},
		{"name not a string", "bulkheads: {12: {max_concurrent: 1}}\n", "bulkheads.12: key is not a string (quote it) (got 12)"},

		// per-bulkhead settings
		{"max_concurrent missing", "bulkheads: {catalog: {max_queue: 1}}\n", "bulkheads.catalog.max_concurrent: is required"},
		{"bulkhead null", "bulkheads: {catalog: }\n", "bulkheads.catalog.max_concurrent: is required"},
		{"max_concurrent zero", "bulkheads: {catalog: {max_concurrent: 0}}\n", "bulkheads.catalog.max_concurrent: must be at least 1 (got 0)"},
		{"max_concurrent float", "bulkheads: {catalog: {max_concurrent: 1.5}}\n", "bulkheads.catalog.max_concurrent: must be an integer (got 1.5)"},
		{"max_concurrent huge", "bulkheads: {catalog: {max_concurrent: 99999999999}}\n", "bulkheads.catalog.max_concurrent: is out of range (got 99999999999)"},
		{"max_queue negative", "bulkheads: {c: {max_concurrent: 1, max_queue: -1}}\n", "bulkheads.c.max_queue: must not be negative (got -1)"},
		{"max_wait negative", "bulkheads: {c: {max_concurrent: 1, max_wait: -1s}}\n", "bulkheads.c.max_wait: must not be negative (got -1s)"},
		{"max_wait without unit", "bulkheads: {c: {max_concurrent: 1, max_wait: 500}}\n",
			`bulkheads.c.max_wait: must be a duration with a unit, like "500ms" or "1m30s" (got 500)`},
		{"lease_ttl zero", "bulkheads: {c: {max_concurrent: 1, lease_ttl: 0s}}\n", `bulkheads.c.lease_ttl: must be positive (got "0s")`},
		{"reserve at one", "bulkheads: {c: {max_concurrent: 4, reserve: {critical: 1}}}\n", "bulkheads.c.reserve.critical: must be in [0, 1) (got 1)"},
		{"reserve NaN", "bulkheads: {c: {max_concurrent: 4, reserve: {normal: .nan}}}\n", "bulkheads.c.reserve.normal: must be in [0, 1) (got NaN)"},
		{"reserve not a number", "bulkheads: {c: {max_concurrent: 4, reserve: {normal: lots}}}\n", `bulkheads.c.reserve.normal: must be a number (got "lots")`},
		{"reserves leave no best_effort", "bulkheads: {c: {max_concurrent: 2, reserve: {critical: 0.5, normal: 0.5}}}\n",
			"bulkheads.c.reserve: critical 0.5 + normal 0.5 leave best_effort no permit of max_concurrent 2"},
		{"dotted name in path", "bulkheads: {api.v1: {max_concurrent: -2}}\n", "bulkheads.api.v1.max_concurrent: must be at least 1 (got -2)"},

		// settings outside bulkheads
		{"grpc address without port", "listen: {grpc: localhost}\n", `listen.grpc: must be host:port with a numeric port`},
		{"http port out of range", "listen: {http: 127.0.0.1:70000}\n", `listen.http: must be host:port with a numeric port, like "127.0.0.1:9001" (port 0 picks a free one) (got "127.0.0.1:70000")`},
		{"named port", "listen: {http: 127.0.0.1:http}\n", `listen.http: must be host:port with a numeric port`},
		{"address not a string", "listen: {grpc: 9001}\n", "listen.grpc: must be a string (got 9001)"},
		{"same listen address", "listen: {grpc: 127.0.0.1:9001, http: 127.0.0.1:9001}\n", `listen.http: must differ from listen.grpc (got "127.0.0.1:9001")`},
		{"log level", "log: {level: INFO}\n", `log.level: must be debug, info, warn or error (got "INFO")`},
		{"log format", "log: {format: xml}\n", `log.format: must be text or json (got "xml")`},
		{"priority header uppercase", "authz: {priority_header: X-Prio}\n", `authz.priority_header: must be lowercase, as Envoy passes header names (got "X-Prio")`},
		{"priority header not a token", "authz: {priority_header: \"x prio\"}\n", `authz.priority_header: must be an HTTP header name, or "" to ignore headers (got "x prio")`},
		{"default priority", "authz: {default_priority: high}\n", `authz.default_priority: must be critical, normal or best_effort (got "high")`},
		{"unknown policy", "authz: {unknown_bulkhead: reject}\n", `authz.unknown_bulkhead: must be deny, allow or default (got "reject")`},
		{"default bulkhead missing", "authz: {unknown_bulkhead: default}\n", "authz.default_bulkhead: is required when authz.unknown_bulkhead is default"},
		{"default bulkhead unknown", "authz: {unknown_bulkhead: default, default_bulkhead: nope}\nbulkheads: {c: {max_concurrent: 1}}\n",
			`authz.default_bulkhead: must name a configured bulkhead (got "nope")`},
		{"default bulkhead without policy", "authz: {default_bulkhead: c}\nbulkheads: {c: {max_concurrent: 1}}\n",
			`authz.default_bulkhead: must be empty unless authz.unknown_bulkhead is default (got "c")`},
		{"deny status low", "authz: {deny_status: 200}\n", "authz.deny_status: must be in 400..599 (got 200)"},
		{"deny status high", "authz: {deny_status: 600}\n", "authz.deny_status: must be in 400..599 (got 600)"},
		{"deny status text", "authz: {deny_status: teapot}\n", `authz.deny_status: must be an integer (got "teapot")`},
		{"deadline margin negative", "authz: {deadline_margin: -1ms}\n", `authz.deadline_margin: must be at least 0 and less than 1s (got -1ms)`},
		{"deadline margin a second", "authz: {deadline_margin: 1s}\n", `authz.deadline_margin: must be at least 0 and less than 1s (got 1s)`},
		{"retry after zero", "authz: {retry_after: 0s}\n", "authz.retry_after: must be positive (got 0s)"},
		{"default ttl zero", "leases: {default_ttl: 0}\n", "leases.default_ttl: must be positive (got 0s)"},
		{"default ttl bare number", "leases: {default_ttl: 60}\n", `leases.default_ttl: must be a duration with a unit, like "500ms" or "1m30s" (got 60)`},
		{"sweep interval negative", "leases: {sweep_interval: -1s}\n", "leases.sweep_interval: must be positive (got -1s)"},
		{"node grace removed", "leases: {node_grace: 5s}\n", "leases.node_grace: removed: heartbeat leases (leases.heartbeat_interval, " +
			"leases.heartbeat_ttl) reclaim a dead Envoy's permits within seconds, whatever its node id; delete this setting"},
		{"heartbeat interval too short", "leases: {heartbeat_interval: 10ms}\n", "leases.heartbeat_interval: must be 0 (heartbeat leases off) or at least 100ms (got 10ms)"},
		{"heartbeat interval bare number", "leases: {heartbeat_interval: 5}\n", `leases.heartbeat_interval: must be a duration with a unit, like "500ms" or "1m30s" (got 5)`},
		{"heartbeat ttl too short", "leases: {heartbeat_interval: 2s, heartbeat_ttl: 3s}\n", "leases.heartbeat_ttl: must be at least twice " +
			"leases.heartbeat_interval, so that one late periodic entry never ends a running request's permit (got 3s)"},
		{"recovery window too short", "leases: {recovery_window: 500ms}\n", "leases.recovery_window: must be 0 (admit at once after a start) " +
			"or between 1.25 x leases.heartbeat_interval (an interval and the heartbeat log's flush, a quarter interval) " +
			"and leases.heartbeat_ttl (got 500ms)"},
		{"recovery window of one interval", "leases: {recovery_window: 1s}\n", "leases.recovery_window: must be 0 (admit at once after a start) " +
			"or between 1.25 x leases.heartbeat_interval (an interval and the heartbeat log's flush, a quarter interval) " +
			"and leases.heartbeat_ttl (got 1s)"},
		{"max route ttl zero", "leases: {max_route_ttl: 0s}\n", "leases.max_route_ttl: must be positive (got 0s)"},
		{"max connection age too short", "listen: {grpc_max_connection_age: 500ms}\n",
			"listen.grpc_max_connection_age: must be 0 (off) or at least 1s (got 500ms)"},
		{"max connection age negative", "listen: {grpc_max_connection_age: -1m}\n",
			"listen.grpc_max_connection_age: must be 0 (off) or at least 1s (got -1m0s)"},
		{"max connection age grace zero", "listen: {grpc_max_connection_age_grace: 0}\n",
			"listen.grpc_max_connection_age_grace: must be positive (got 0s)"},
		{"max connection age grace not a duration", "listen: {grpc_max_connection_age_grace: soon}\n",
			`listen.grpc_max_connection_age_grace: must be a duration with a unit, like "500ms" or "1m30s" (got "soon")`},
		{"max bulkheads zero", "limits: {max_bulkheads: 0}\n", "limits.max_bulkheads: must be in 1..100000 (got 0)"},
		{"too many bulkheads", "limits: {max_bulkheads: 1}\nbulkheads: {a: {max_concurrent: 1}, b: {max_concurrent: 1}}\n",
			"bulkheads: at most limits.max_bulkheads (1) bulkheads may be configured (got 2 bulkheads)"},

		// the admin listener and section
		{"admin address without port", "listen: {admin: localhost}\n", `listen.admin: must be host:port with a numeric port`},
		{"admin address not a string", "listen: {admin: 9091}\n", "listen.admin: must be a string (got 9091)"},
		{"admin same as grpc", "listen: {grpc: 127.0.0.1:9001, admin: 127.0.0.1:9001}\n", `listen.admin: must differ from listen.grpc (got "127.0.0.1:9001")`},
		{"admin same as http", "listen: {admin: 127.0.0.1:9090}\n", `listen.admin: must differ from listen.http (got "127.0.0.1:9090")`},
		{"admin on all interfaces", "listen: {admin: 0.0.0.0:9091}\n", `listen.admin: ` + nonLoopback + ` (got "0.0.0.0:9091")`},
		{"admin with empty host", "listen: {admin: \":9091\"}\n", `listen.admin: ` + nonLoopback + ` (got ":9091")`},
		{"admin on ipv6 any", "listen: {admin: \"[::]:9091\"}\n", `listen.admin: ` + nonLoopback + ` (got "[::]:9091")`},
		{"admin on a host name", "listen: {admin: bulkhead.internal:9091}\n", `listen.admin: ` + nonLoopback + ` (got "bulkhead.internal:9091")`},
		{"admin on a LAN address", "listen: {admin: 192.168.1.10:0}\n", `listen.admin: ` + nonLoopback + ` (got "192.168.1.10:0")`},
		{"admin elsewhere with TLS only", "listen: {admin: 10.0.0.1:9091}\nadmin: {tls: {cert_file: c, key_file: k}}\n",
			`listen.admin: ` + nonLoopback + ` (got "10.0.0.1:9091")`},
		{"token in the file", "admin: {token: s3cret}\n",
			"admin.token: unknown field: the token is never written in this file; use admin.token_file or the environment variable BULKHEAD_ADMIN_TOKEN"},
		{"unknown admin field", "admin: {tokenfile: x}\n", "admin.tokenfile: unknown field (known: token_file, tls)"},
		{"capitalised admin field", "admin: {Token_File: x}\n", "admin.Token_File: unknown field (field names are lowercase: token_file)"},
		{"unknown tls field", "admin: {tls: {ca_file: x}}\n", "admin.tls.ca_file: unknown field (known: cert_file, key_file, client_ca_file)"},
		{"tls not a mapping", "admin: {tls: on}\n", `admin.tls: must be a mapping (got "on")`},
		{"admin not a mapping", "admin: [x]\n", "admin: must be a mapping (got a list)"},
		{"token file not a string", "admin: {token_file: 5}\n", "admin.token_file: must be a string (got 5)"},
		{"cert file a mapping", "admin: {tls: {cert_file: {a: 1}, key_file: k}}\n", "admin.tls.cert_file: must be a string (got a mapping)"},
		{"cert without key", "admin: {tls: {cert_file: c}}\n", "admin.tls.key_file: is required when admin.tls.cert_file is set"},
		{"key without cert", "admin: {tls: {key_file: k}}\n", "admin.tls.cert_file: is required when admin.tls.key_file is set"},
		{"client CA alone", "admin: {tls: {client_ca_file: ca}}\n",
			`admin.tls.client_ca_file: requires admin.tls.cert_file and admin.tls.key_file (mTLS needs a server certificate) (got "ca")`},

		// gRPC listener: TLS and bounds
		{"grpc cert without key", "listen: {grpc_tls: {cert_file: c}}\n", "listen.grpc_tls.key_file: is required when listen.grpc_tls.cert_file is set"},
		{"grpc key without cert", "listen: {grpc_tls: {key_file: k}}\n", "listen.grpc_tls.cert_file: is required when listen.grpc_tls.key_file is set"},
		{"grpc client CA alone", "listen: {grpc_tls: {client_ca_file: ca}}\n",
			`listen.grpc_tls.client_ca_file: requires listen.grpc_tls.cert_file and listen.grpc_tls.key_file (mTLS needs a server certificate) (got "ca")`},
		{"unknown grpc_tls field", "listen: {grpc_tls: {ca: x}}\n", "listen.grpc_tls.ca: unknown field (known: cert_file, key_file, client_ca_file)"},
		{"grpc_tls not a mapping", "listen: {grpc_tls: true}\n", "listen.grpc_tls: must be a mapping (got true)"},
		{"max recv bytes too small", "listen: {grpc_max_recv_bytes: 1024}\n", "listen.grpc_max_recv_bytes: must be in 65536..67108864 (bytes) (got 1024)"},
		{"max recv bytes too large", "listen: {grpc_max_recv_bytes: 1073741824}\n", "listen.grpc_max_recv_bytes: must be in 65536..67108864 (bytes) (got 1073741824)"},
		{"max recv bytes text", "listen: {grpc_max_recv_bytes: 4MiB}\n", `listen.grpc_max_recv_bytes: must be an integer (got "4MiB")`},
		{"max streams too low", "listen: {grpc_max_concurrent_streams: 10}\n",
			"listen.grpc_max_concurrent_streams: must be in 100..1048576 (each waiting Check is a stream) (got 10)"},
		{"max permits zero", "leases: {max_permits: 0}\n", "leases.max_permits: must be in 1..100000000 (got 0)"},
		{"max permits too many", "leases: {max_permits: 100000001}\n", "leases.max_permits: must be in 1..100000000 (got 100000001)"},

		// trusted priority sources
		{"trusted sources a scalar", "authz: {trusted_priority_sources: 5}\n",
			`authz.trusted_priority_sources: must be a list of CIDR prefixes, like ["127.0.0.0/8", "10.0.0.0/8"] (got 5)`},
		{"trusted sources a mapping", "authz: {trusted_priority_sources: {a: 1}}\n",
			`authz.trusted_priority_sources: must be a list of CIDR prefixes`},
		{"trusted source bare address", "authz: {trusted_priority_sources: [127.0.0.0/8, 10.0.0.1]}\n",
			`authz.trusted_priority_sources[1]: must be a CIDR prefix, like "10.0.0.0/8" (one address: "10.0.0.1/32") (got "10.0.0.1")`},
		{"trusted source host bits", "authz: {trusted_priority_sources: [10.1.2.3/8]}\n",
			`authz.trusted_priority_sources[0]: has bits set beyond its prefix length (did you mean "10.0.0.0/8"?) (got "10.1.2.3/8")`},
		{"trusted source not an address", "authz: {trusted_priority_sources: [mesh]}\n",
			`authz.trusted_priority_sources[0]: must be a CIDR prefix, like "10.0.0.0/8" (got "mesh")`},
		{"trusted source a number", "authz: {trusted_priority_sources: [8]}\n",
			`authz.trusted_priority_sources[0]: must be a CIDR prefix string, like "10.0.0.0/8" (got 8)`},
		{"trusted source prefix too long", "authz: {trusted_priority_sources: [\"::1/129\"]}\n",
			`authz.trusted_priority_sources[0]: must be a CIDR prefix`},

		// tenants
		{"tenant header uppercase", "authz: {tenant_header: X-Tenant}\n", `authz.tenant_header: must be lowercase, as Envoy passes header names (got "X-Tenant")`},
		{"tenant header not a token", "authz: {tenant_header: \"x tenant\"}\n",
			`authz.tenant_header: must be an HTTP header name, or "" to turn tenants off (got "x tenant")`},
		{"tenant header pseudo-header", "authz: {tenant_header: \":authority\"}\n", `authz.tenant_header: must be an HTTP header name`},
		{"tenant header is the priority header", "authz: {tenant_header: x-bulkhead-priority}\n",
			`authz.tenant_header: must differ from authz.priority_header (got "x-bulkhead-priority")`},
		{"max tenants zero", "limits: {max_tenants: 0}\n", "limits.max_tenants: must be in 1..1000000 (got 0)"},
		{"max tenants too many", "limits: {max_tenants: 1000001}\n", "limits.max_tenants: must be in 1..1000000 (got 1000001)"},
		{"max tenants text", "limits: {max_tenants: lots}\n", `limits.max_tenants: must be an integer (got "lots")`},
		{"tenant without header", "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 1}}}\n",
			"bulkheads.c.tenant: tenant template has no effect: set authz.tenant_header"},
		{"tenant is a list", th + "bulkheads: {c: {max_concurrent: 2, tenant: [1]}}\n", "bulkheads.c.tenant: must be a mapping (got a list)"},
		{"tenant max_concurrent missing", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_queue: 1}}}\n",
			"bulkheads.c.tenant.max_concurrent: is required"},
		{"tenant empty", th + "bulkheads: {c: {max_concurrent: 2, tenant: {}}}\n", "bulkheads.c.tenant.max_concurrent: is required"},
		{"tenant max_concurrent zero", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 0}}}\n",
			"bulkheads.c.tenant.max_concurrent: must be in 1..2, the bulkhead's max_concurrent (got 0)"},
		{"tenant over the bulkhead", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 3}}}\n",
			"bulkheads.c.tenant.max_concurrent: must be in 1..2, the bulkhead's max_concurrent (got 3)"},
		{"tenant under a bad bulkhead", th + "bulkheads: {c: {max_concurrent: 0, tenant: {max_concurrent: -1}}}\n",
			"bulkheads.c.tenant.max_concurrent: must be at least 1 (got -1)"},
		{"tenant max_concurrent text", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: two}}}\n",
			`bulkheads.c.tenant.max_concurrent: must be an integer (got "two")`},
		{"tenant max_queue negative", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 1, max_queue: -1}}}\n",
			"bulkheads.c.tenant.max_queue: must not be negative (got -1)"},
		{"tenant max_wait negative", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 1, max_wait: -1s}}}\n",
			`bulkheads.c.tenant.max_wait: must not be negative (got "-1s")`},
		{"tenant max_wait without unit", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 1, max_wait: 5}}}\n",
			`bulkheads.c.tenant.max_wait: must be a duration with a unit, like "500ms" or "1m30s" (got 5)`},
		{"tenant reserve", th + "bulkheads: {c: {max_concurrent: 2, tenant: {max_concurrent: 1, reserve: {critical: 0.5}}}}\n",
			"bulkheads.c.tenant.reserve: unknown field (known: max_concurrent, max_queue, max_wait)"},
		{"tenant in a dotted bulkhead", th + "bulkheads: {api.v1: {max_concurrent: 1, tenant: {max_concurrent: 2}}}\n",
			"bulkheads.api.v1.tenant.max_concurrent: must be in 1..1, the bulkhead's max_concurrent (got 2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse(testSource, []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.Source != testSource {
				t.Errorf("error %q is not an *InvalidError from %s", err, testSource)
			}
			if !hasLineWithPrefix(err.Error(), testSource+": "+tt.want) {
				t.Errorf("error\n%s\nhas no line starting %q", err, testSource+": "+tt.want)
			}
		})
	}
}

func hasLineWithPrefix(msg, prefix string) bool {
	for _, line := range strings.Split(msg, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestParseEveryProblem checks that one error lists every problem, one per
// line, and nothing else: no derived complaints about fields already reported.
func TestParseEveryProblem(t *testing.T) {
	t.Parallel()
	yaml := `listen: {grpc: nope, admin: 0.0.0.0:9091}
log: {level: loud}
authz: {deny_status: 200, unknown_bulkhead: default, tenant_header: X-T}
leases: {sweep_interval: 0s}
admin: {tls: {cert_file: c}}
bulkheads:
  Catalog: {max_concurrent: 1}
  catalog: {max_concurrent: 0, max_concurent: 3}
  orders: {max_concurrent: x, reserve: {critical: 2}, tenant: {max_concurrent: 0, max_queue: -1}}
`
	_, err := Parse(testSource, []byte(yaml))
	want := []string{
		`admin.tls.key_file: is required when admin.tls.cert_file is set`,
		`authz.default_bulkhead: is required when authz.unknown_bulkhead is default`,
		`authz.deny_status: must be in 400..599 (got 200)`,
		`authz.tenant_header: must be lowercase, as Envoy passes header names (got "X-T")`,
		`bulkheads.Catalog: bulkhead names are case-sensitive and must be lowercase, matching ` + NamePattern + ` (got "Catalog")`,
		`bulkheads.catalog.max_concurent: unknown field (known: max_concurrent, max_queue, max_wait, lease_ttl, reserve, enforce, queue, codel, circuit_breaker, tenant, connections, shares)`,
		`bulkheads.catalog.max_concurrent: must be at least 1 (got 0)`,
		`bulkheads.orders.max_concurrent: must be an integer (got "x")`,
		`bulkheads.orders.reserve.critical: must be in [0, 1) (got 2)`,
		`bulkheads.orders.tenant.max_concurrent: must be at least 1 (got 0)`,
		`bulkheads.orders.tenant.max_queue: must not be negative (got -1)`,
		`leases.sweep_interval: must be positive (got 0s)`,
		`listen.admin: ` + nonLoopback + ` (got "0.0.0.0:9091")`,
		`listen.grpc: must be host:port with a numeric port, like "127.0.0.1:9001" (port 0 picks a free one) (got "nope")`,
		`log.level: must be debug, info, warn or error (got "loud")`,
	}
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("Parse error = %v, want *InvalidError", err)
	}
	var got []string
	for _, p := range ie.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, testSource+": ") {
			t.Errorf("line %q does not start with the source", line)
		}
	}
}

func TestParseTooLarge(t *testing.T) {
	t.Parallel()
	_, err := Parse(testSource, make([]byte, MaxFileSize+1))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("error = %v, want ErrInvalid naming the size", err)
	}
}
