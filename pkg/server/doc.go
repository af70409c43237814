// Package server wires Bulkhead together and runs it: the bulkhead
// registry, the permit ledger and its sweeper, the tracker of Envoy nodes
// (when leases.node_grace is set), the metrics, and the listeners. The gRPC
// listener serves Envoy's ext_authz Check, the access-log stream and gRPC
// health (with listen.grpc_max_connection_age, it recycles connections);
// the HTTP listener serves /metrics, /healthz and /readyz.
//
// Runner.Run owns every goroutine it starts and returns only after all of
// them have stopped. Shutdown, when its context ends: readiness and gRPC
// health turn NOT_SERVING, no new RPC is accepted, Checks in flight get up
// to the drain timeout to answer, then access-log streams are closed and
// the HTTP listener shuts down.
package server
