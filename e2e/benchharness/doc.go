// Command benchharness measures what the bulkhead costs, side by side with
// its alternatives, and writes the figures docs/performance.md reports.
//
//	go run ./e2e/benchharness [-quick] [-out docs/perf]     (or: make bench)
//
// It runs, in one process:
//
//  1. the Go micro-benchmarks of pkg/bulkhead, pkg/permit, pkg/authz and
//     pkg/accesslog (go test -bench, -p 1), and a CPU profile of
//     BenchmarkHotPath, a request's whole life in the daemon in process;
//  2. a load harness against real Envoys on 127.0.0.1, one per
//     configuration, all started at once and measured in turn: Envoy
//     straight to the upstream (the floor), Envoy with ext_authz to a no-op
//     server (./noopauthz), Envoy with the bulkhead daemon (ext_authz and
//     the gRPC access log; the bootstrap of package envoy, as shipped),
//     Envoy's own circuit breaker (max_requests), the bulkhead on the Redis
//     ledger with one replica and with two behind the same Envoy, each per
//     request and with capacity leases (ledger.redis.capacity_leases; each
//     configuration on a redis-server the harness starts), the bulkhead
//     with shares in mode auto (bulkheads.bench.shares.mode: auto; the
//     shipped bootstrap with the route pair, envoy.Route.Shares) with the
//     limit far above the load, at twice the closed loop's connections and
//     at 5/4 of them (each on a daemon of its own: the closed loop at 3%,
//     50% and 80% of the limit), near the limit (the near phase: a limit of
//     the closed loop's connections, each request 5 ms at the upstream)
//     with shares, strict in memory and on the Redis ledger's two replicas
//     per request and with capacity leases, and a diagnostic
//     no-op ext_authz plus access log. For each: closed-loop maximum throughput,
//     then open-loop latency at 25, 50 and 75% of the floor's maximum,
//     measured from each request's intended send time (coordinated
//     omission corrected); CPU per 1,000 requests and wake-ups per request
//     of every process from /proc; what Envoy exchanged with its sidecar,
//     from Envoy's /stats; the daemon's memory from its /metrics; the
//     release lag from its permit hold-time histogram; on the Redis
//     ledger, the calls to Redis per request (the daemons' counters and
//     Redis's INFO commandstats, the periodic ticks apart; the capacity
//     leases' calls per request and per second) and Redis's CPU (INFO cpu
//     and /proc), per request also above the server's idle floor (its own
//     CPU over redisproc.FloorWindow right after it started, before any
//     daemon connected: a bare Redis's timers); with shares, the mode and the share at each window's end
//     and its overflows (the daemon's bulkhead_shares_*, Envoy's /stats).
//     Figures measured in
//     several rounds are reported as their median with its spread;
//  3. the heartbeat phase: the shipped configuration with heartbeat leases
//     on and off (Envoy's periodic access log and the daemon's
//     leases.heartbeat_interval; each of the two with a daemon of its own),
//     rounds alternating, under short requests (1 ms upstream, open loop)
//     and long ones (2 s upstream, 200 in flight): daemon and Envoy CPU per
//     request and per periodic entry.
//
// Results: results.md, results.json, latency.png and hotpath-profile.txt in
// the -out folder. Absolute figures depend on the machine and on whatever
// else runs on it; compare configurations within one run.
//
// Ownership: the harness owns every process it starts (the daemons and the
// no-op server are built from source into a temporary directory; the
// redis-servers are the system's) and stops them, Envoys and redis-servers
// included, before it exits; each dies with the harness if it
// is killed (parent-death signal). Nothing here is safe for concurrent use
// beyond what its comments say; the load workers are the only goroutines
// and each phase waits for all of them.
package main
