// Package admission is the seam between Bulkhead's two Envoy-facing
// servers and the backends that decide admissions.
//
// Ledger is the contract: Admit (one Request value: the bulkhead, the
// class, the tenant, the lease, the node, the deadline), Release
// and Renew (renew or adopt; one permit.Result for each), Holders. The
// Check server (package authz) admits through it and the access-log server
// (package accesslog) ends and renews through it; neither knows which
// backend answers. Two backends keep it: Memory, this process's limiters
// and permit ledger, and the Redis ledger (package redisledger) that many
// replicas share, wrapped by its unavailable policy. Package admissiontest
// runs the contract against both.
//
// The package also names what every shared backend reports: its
// availability (State), a bulkhead's global counts (Global) and the calls
// to its store (Op).
//
// Memory is safe for concurrent use.
package admission
