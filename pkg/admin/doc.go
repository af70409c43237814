// Package admin is Bulkhead's control-plane API: the gRPC service
// bulkhead.admin.v1.AdminService (generated from proto/) and the same
// operations as JSON over HTTP, both served by one http.Handler on the
// admin listener (gRPC over HTTP/2, cleartext or TLS; JSON over HTTP/1.1 or
// HTTP/2).
//
// The package owns the API edge only: request validation, authentication,
// translating errors to gRPC status codes and HTTP statuses, and logging of
// refused calls. The run-time state (effective settings, overrides and
// their relation to the config file) is owned by the Controller it is given
// (pkg/control in the daemon). Changes are logged by the Controller, with
// the actor this package derives from the caller's credentials. The
// holders of a bulkhead's permits are read from the Leases it is given
// (the daemon's permit ledger), at most MaxHolders at a time and never
// with their tokens.
//
// # Run-time changes and the config file
//
// An Update overrides the file's settings for that bulkhead until (a) the
// file's own entry for that bulkhead changes on a reload (the file wins),
// (b) a Reset, or (c) a restart (overrides live in memory only). Reloads
// that do not touch that bulkhead keep the override.
//
// # Access
//
// An Authenticator decides who may call: a bearer token (compared in
// constant time; from a file, followed as it rotates), a verified client
// certificate (mTLS: Serve with a creds.TLS that has a client CA file), or,
// when neither is configured, loopback callers only. CheckListen refuses a
// non-loopback admin address that has neither. The TLS files, the token
// file and the loopback rule are package creds's, shared with the gRPC
// listener and the config checks; the TLS files are read again when they
// change, so a rotated certificate serves new connections without a
// restart.
//
// # Concurrency
//
// Server and Authenticator are safe for concurrent use. Server.Serve owns
// the goroutines it starts (the HTTP server's) and returns after they have
// stopped; watch streams end when their client goes away or Stop is called.
package admin
