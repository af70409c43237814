// Package creds owns the credentials Bulkhead's listeners serve and check,
// read from files an operator (or Kubernetes) may rotate while the daemon
// runs, and the one rule for a listener that may do without them:
//
//   - TLS: a server key pair and, for mutual TLS, a bundle of client CAs
//     (listen.grpc_tls, admin.tls). A TLS value re-reads its files when they
//     change and serves the new certificate to the next handshake; a change
//     that does not load keeps the last good one and is reported once.
//   - Bearer tokens (admin.token_file): ReadToken reads and checks one,
//     TokenFile follows its file as it rotates.
//   - IsLoopback: whether an address (a listen address or a caller's) is
//     the loopback interface, where no credentials are required.
//
// Every file is read bounded (ReadFile) and must be a regular file (or a
// symlink to one), so that a FIFO cannot block a read. Errors name the file,
// never its content. pkg/config uses the same functions for its start-time
// checks, so that a file Load accepts is a file the listeners can serve.
//
// The package imports nothing of Bulkhead's but pkg/clock. TLS and
// TokenFile are safe for concurrent use.
package creds
