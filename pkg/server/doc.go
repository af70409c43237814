// Package server wires Bulkhead together and runs it: wiring and
// lifecycle only. New builds every part the configuration describes (the
// bulkhead registry, the permit ledger, the Check and access-log servers,
// the breakers and sizing, Control, the admin server, the metrics, and
// with ledger.backend redis the shared ledger, package replication's
// Replicator and Gate); Run binds the listeners and runs them. The gRPC
// listener serves Envoy's ext_authz Check, the access-log stream and gRPC
// health, bounded (listen.grpc_max_*, 64 KiB of metadata per request) and,
// with listen.grpc_tls, over TLS files creds.TLS reloads as they rotate;
// the HTTP listener serves /metrics, /healthz and /readyz.
//
// Runner.Run owns every goroutine it starts, in errgroups, and returns only
// after all of them have stopped; a server that fails ends Run with its
// error. Shutdown, when its context ends: readiness and gRPC health turn
// NOT_SERVING, no new RPC is accepted, Checks in flight get up to the drain
// timeout to answer, then access-log streams are closed and the HTTP
// listener shuts down; then the sweeper, the recovery window, the shared
// ledger, the replication and the configuration watch stop, and last the
// admin server.
package server
