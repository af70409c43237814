// Package replication is what the replicas sharing the Redis ledger tell
// each other besides the permits: the Redis store they meet in (its
// client, built from ledger.redis, and this replica's id), and the gate
// that takes a replica cut off from the ledger out of the data plane.
//
// A Gate is safe for concurrent use. A Store's client is go-redis's, safe
// for concurrent use.
package replication
