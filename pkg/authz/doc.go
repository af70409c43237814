// Package authz is Bulkhead's Envoy ext_authz server
// (envoy.service.auth.v3.Authorization). A Check names its bulkhead in the
// route's context_extensions["bulkhead"]; its priority comes from a
// configured request header or context_extensions["priority"]. The server
// takes a permit from that bulkhead, waiting at most until the gRPC deadline
// less a margin, registers it in the permit ledger, and answers OK with the
// permit token in dynamic_metadata, or a DeniedHttpResponse (503 by
// default, retry-after, x-bulkhead-reason, a JSON body).
//
// A denial is an answer, never a gRPC error. gRPC errors mean "cannot
// decide" (the Check was cancelled, or the ledger is full) so that Envoy's
// failure mode applies. A permit granted to a Check whose context ended
// before it could answer is released at once (source "cancel").
//
// Server is safe for concurrent use; its Policy can be swapped at run time.
package authz
