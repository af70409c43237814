// Package replication is what the replicas sharing the Redis ledger tell
// each other besides the permits, and what a replica does about the
// ledger's availability outside it:
//
//   - Store: the Redis they meet in, its client built from ledger.redis
//     (password files, TLS, sentinel or cluster), and this replica's id;
//   - Replicator: the circuit breakers' windows (breakers.go), the
//     requests that ended here for sizing (sizing.go) and the admin
//     overrides (overrides.go), shared through the store;
//   - Gate: the gRPC health check and the access-log streams of a replica
//     cut off from the ledger (gate.go);
//   - GlobalSampler: the mesh's permits in use, for sizing.
//
// The permits and the capacity leases are the ledger's (package
// redisledger), not this package's.
//
// # One availability signal
//
// Whether Redis answers is the Redis ledger's judgement, not this
// package's: the Replicator reads it (New's state,
// redisledger.Ledger.State) at each round. While it is Unavailable the
// Replicator calls Redis for nothing: each breaker decides on its own
// outcomes (the peers' windows are dropped), suggestions are refused
// (ErrUnavailable), and an override made here waits to be written; the
// change, each way, is logged once, in Replicator.available. A call that
// fails while the ledger still finds Redis available (it has not noticed
// yet, or Redis refuses that call) decides nothing: it is logged (at most
// every errorLogEvery) and retried at the next round, and a breaker round
// trip that failed drops the peers' windows until one succeeds.
//
// # One loop
//
// Replicator.Run is one goroutine: a round every breakerSyncEvery (250ms)
// shares the breakers, and every fourth round (each second) the sizing
// counts and the overrides, which it also writes as soon as one is made
// here. The first round is at once: a replica that starts applies the
// overrides in force. Run returns when its context ends, after taking this
// replica's breaker windows out of Redis.
//
// # No cycle at construction
//
// The overrides go both ways between the Replicator and the Control:
// Control tells the Replicator of an override made here (Override is its
// control.OverrideSink), and the Replicator applies the others' to it. So
// the Replicator is built first, its Override passed to control.New, and
// the Control is given to Run as an Applier (the one method of
// *control.Control it calls, declared here): nothing is patched after
// construction.
//
// Safe for concurrent use: a Store's client (go-redis's), a Gate, a
// GlobalSampler (if its functions are), and a Replicator's Override and
// Peers. A Replicator's Run is called once; everything else it does
// happens in Run's goroutine.
package replication
