// Package authz is Bulkhead's Envoy ext_authz server
// (envoy.service.auth.v3.Authorization). A Check names its bulkhead in the
// route's context_extensions["bulkhead"]; its priority comes from a
// configured request header or context_extensions["priority"]. The server
// asks the ledger (admission.Ledger: this process's limiters, or the Redis
// ledger many replicas share; the server does not know which) for a permit
// of that bulkhead, waiting at most until the gRPC deadline less a margin,
// and answers OK with the permit token in dynamic_metadata, or a
// DeniedHttpResponse (503 by default, retry-after, x-bulkhead-reason, a
// JSON body). Every decision of a Check is in check.go; one Request value
// carries them into the ledger.
//
// The permit is registered with the Envoy node named by the Check's gRPC
// metadata x-bulkhead-node (NodeHeader; missing or invalid: no node), shown
// as its holder. With heartbeats on (Policy.HeartbeatTTL), its lease is the
// heartbeat TTL, renewed by the request's periodic access-log entries (see
// package accesslog). With heartbeats off, and for a node known not to send
// periodic entries (SilentNodes), it is the long lease: the bulkhead's
// lease_ttl, or the route's own context_extensions["lease_ttl"] (a Go
// duration, capped by Policy.MaxRouteLeaseTTL; an invalid value is counted
// and ignored).
//
// Priority is trusted only as far as the configuration says: the route's
// context_extensions["priority"] (else Policy.DefaultPriority) is the base
// class; the request header may lower it from anywhere, but raise it only
// when the Check's downstream source address (attributes.source) is inside
// Policy.TrustedPrioritySources. A raise from elsewhere is ignored and
// counted (InputRecorder.UntrustedPriority).
//
// Inputs from the request are bounded before use: a priority value over
// MaxPriorityLen is invalid unread, a tenant value over MaxTenantLen is
// treated as no tenant, and a node metadata value that is not a valid node id
// is ignored; each is counted. Metric labels are configured bulkhead names
// and fixed sets only.
//
// Envoy's network ext_authz filter asks the same Check before a TCP
// connection proceeds; its CheckRequest (Envoy 1.40) has source and
// destination addresses, no request and no context_extensions. Such a
// Check names its bulkhead by its destination port (Policy.Connections,
// the listener's port) and takes its class from the Envoy node's label
// permit.LabelPriority (sent as destination labels with the filter's
// bootstrap_metadata_labels_key), else the port's. It then runs the same
// acquire, lease and answer as a request's; Envoy closes a denied
// connection, and the access log of the connection brings the permit back.
//
// A denial is an answer, never a gRPC error. gRPC errors mean "cannot
// decide" (the Check was cancelled, or the ledger is full or cannot reach
// its store under a policy that does not answer) so that Envoy's failure
// mode applies. A permit granted to a Check whose context ended before it
// could answer is released by the ledger at once (source "cancel").
//
// Register serves the Server to Envoy without decoding whole CheckRequests:
// the gRPC server, built with wire.ServerCodec, hands the handler the
// encoding, which it walks for the few fields a Check reads (request.go),
// with a full decode's semantics; an admission is sent pre-encoded.
// Server.Check, the decoded path, runs the same logic.
//
// Server is safe for concurrent use; its Policy can be swapped at run time.
package authz
