// Package meshsim simulates a mesh of Envoys in front of one Bulkhead
// daemon, to measure what the daemon holds and costs per Envoy (issue 28).
//
// A simulated Envoy is what a real one sends, built from Envoy's own proto
// types and from messages captured from a real Envoy 1.40 (captures/, made
// by Capture): per worker one HTTP/2 connection to the daemon (Envoy's
// connection pools are per worker) carrying the worker's Check RPCs, with
// x-bulkhead-node initial metadata and the route's context_extensions, and
// the worker's two access-log streams (the release log, unbuffered, and the
// heartbeat log, batched), each naming its node in its first message only.
// Every request that holds a permit sends a DownstreamPeriodic entry each
// heartbeat interval while it runs and a DownstreamEnd entry when it ends,
// the permit's token under envoy.filters.http.ext_authz. Connections are
// pinged each second, as the shipped Envoy configs do. Where the shipped
// configs health-check the daemons (replicas on the Redis ledger), each
// simulated Envoy also keeps a connection of its own to each daemon, as
// Envoy's active health checker does, pinged as the others, with a
// grpc.health.v1 Health/Check on it each second (-health; none on one
// in-memory daemon, whose shipped configs have no health check).
//
// The load is open loop at a total rate spread over the Envoys, with a mix
// of request durations, many bulkheads and tenants, and a bound on the
// requests outstanding. The simulator counts admitted-and-running requests
// per bulkhead and checks the daemon's caps with them.
//
// Run (one measurement at a number of Envoys; the reconnect storm) starts
// the daemon as a child process and reads its cost from /proc and its
// /metrics. Report writes the table and the plot. cmd/meshsim is the
// command; it is a test tool and is not shipped.
//
// The daemon may keep its permits on Redis instead (-ledger redis, or
// leases: with capacity leases; issue 25), on a redis-server the run
// starts on a free loopback port without persistence, and run as
// -replicas K daemons behind each Envoy's one bulkhead cluster. An Envoy
// spreads over the replicas as the shipped cluster's round robin does
// (-spread request: each worker connected to every replica, its Checks in
// turn, its release stream on replica i mod K and its heartbeat stream on
// replica i+1 mod K, worker i of the mesh), or pinned (-spread worker:
// worker i's connection, Checks and streams on replica i mod K). The
// daemon figures are then the replicas' sums, and a second table gives per
// window the replicas' calls to Redis by operation
// (bulkhead_ledger_calls_total), the scripts Redis ran (INFO
// commandstats: EVALSHA and EVAL) and its CPU (INFO cpu) per admitted
// request, in all and above the bare Redis's own floor (its CPU a second
// over redisproc.FloorWindow after it started, before any daemon did:
// its timers, taken off over the window; the daemons' idle ticks stay
// in), Redis's CPU a second while the daemons idled before the load and
// bare, and the share admitted from capacity leases. Far from every
// limit (-limited=false) and without tenant compartments (-tenants 0,
// which hold no lease), the three ledgers compare as (make meshsim-ledger):
//
//	go run ./e2e/meshsim/cmd/meshsim -n 100 -rate 1000 -warmup 5s -window 20s -storm=false -tenants 0 -limited=false -ledger memory
//	go run ./e2e/meshsim/cmd/meshsim -n 100 -rate 1000 -warmup 5s -window 20s -storm=false -tenants 0 -limited=false -ledger redis -replicas 2
//	go run ./e2e/meshsim/cmd/meshsim -n 100 -rate 1000 -warmup 5s -window 20s -storm=false -tenants 0 -limited=false -ledger leases -replicas 2
//
// With -shares MODE (issue 26) every bulkhead is in that shares mode and
// each simulated Envoy is configured for shares, as the shipped front
// proxy with shares is: its main thread's connection to the daemon
// carries an RTDS stream (the node in its first request only, an ACK with
// version and nonce for each response) and an LRS stream (every report
// carrying the whole captured node, about 61 KB, as Envoy 1.40 sends it,
// with the requests in flight in each share cluster the daemon asks for,
// at the interval it asks for). A request whose route the applied layer
// sends to its share cluster passes that cluster's circuit breaker at the
// pushed max_requests, with no Check and no access-log entry; a layer
// whose TTL ran out is dropped (every request strict again). -idle-window
// measures the daemon with every Envoy connected and no requests, and the
// cost table gives the daemon's CPU per Envoy per second (see
// docs/performance.md, "Shares: daemon cost"):
//
//	go run ./e2e/meshsim/cmd/meshsim -n 100 -rate 1000 -warmup 5s -window 20s -idle-window 15s -storm=false -tenants 0 -limited=false -shares shares
//
// To measure share overflows (the requests a share's circuit breaker
// turns away, Envoy's immediate 503, while the bulkhead has room): -limit
// gives every bulkhead that limit, -load sets the rate for that part of it
// in flight (Little's law over -durations' mean), -poisson sends the
// requests at exponential intervals, -skew sends that part of them to one
// busy Envoy and -shift moves it to the next one every so long. A table
// then gives per N the requests, those a share turned away, the Checks
// (and those denied), the Envoys' reported requests in flight and the
// shares they ran with at each load report (docs/performance.md, "Shares:
// several Envoys on a small limit"):
//
//	go run ./e2e/meshsim/cmd/meshsim -n 2,5,10,20 -bulkheads 1 -limit 64 -load 0.5 -poisson -durations 10ms:50,30ms:30,100ms:20 \
//	  -skew 0.5 -shift 5s -shares auto -tenants 0 -storm=false -limited=false -warmup 4s -window 15s
//
// On a small machine the simulator's load shares the daemon's CPUs;
// -daemon-cpus and -sim-cpus give each CPUs of its own (taskset -c lists;
// the simulator runs itself again under taskset, each daemon is started
// under it, so every thread of each is pinned). Each window's end reads
// every thread's Cpus_allowed_list and the simulator's own CPU into the
// results (docs/performance.md, "The daemon on a core of its own"):
//
//	go run ./e2e/meshsim/cmd/meshsim -daemon-cpus 0 -sim-cpus 1 -n 10,1000,5000 -rate 500 -warmup 5s -window 20s
//
// Types are safe for concurrent use where their comments say so; a Mesh is
// run by one goroutine and stopped by its context.
package meshsim
