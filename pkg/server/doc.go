// Package server wires Bulkhead together and runs it: the bulkhead
// registry, the permit ledger and its sweeper, heartbeat leases and the
// recovery window after a start, the metrics, and the listeners. The gRPC
// listener serves Envoy's ext_authz Check, the access-log stream and gRPC
// health (with listen.grpc_max_connection_age, it recycles connections);
// the HTTP listener serves /metrics, /healthz and /readyz.
//
// The gRPC listener is bounded (listen.grpc_max_recv_bytes per message,
// listen.grpc_max_concurrent_streams per connection, 64 KiB of metadata per
// request) and, with listen.grpc_tls, serves TLS or mutual TLS; the admin
// listener does the same with admin.tls. Both load their files with
// creds.TLS: the certificate, key and client CA bundle are read again when
// they change (checked at most once a second, on handshakes: no
// goroutine), so a rotated certificate serves new connections without a
// restart; package metrics counts the loads of each listener.
//
// Runner.Run owns every goroutine it starts, in errgroups, and returns only
// after all of them have stopped; a server that fails ends Run with its
// error. Shutdown, when its context ends: readiness and gRPC health turn
// NOT_SERVING, no new RPC is accepted, Checks in flight get up to the drain
// timeout to answer, then access-log streams are closed and the HTTP
// listener shuts down; then the sweeper, the recovery window and the
// configuration watch stop, and last the admin server.
package server
