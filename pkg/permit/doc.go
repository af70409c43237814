// Package permit is the permit ledger: it owns the tokens that stand for
// granted bulkhead permits, the leases that bound how long a permit may be
// held, and the guarantee that every permit goes back exactly once.
//
// # Flow
//
// The ext_authz server acquires a permit from a bulkhead and hands it to
// Memory.Grant, which returns an unguessable token (128 bits from
// crypto/rand, 22 characters of unpadded URL-safe base64). Envoy carries the
// token in dynamic metadata (MetadataNamespace, MetadataToken) into its
// access log. Because Envoy's access-log stream is at most once, every grant
// is a lease with a TTL, and the access log keeps it alive:
//
//   - each periodic entry of the running request (DownstreamPeriodic, every
//     heartbeat interval) calls Renew, which pushes the lease's expiry to
//     at least the heartbeat TTL from now;
//   - the request's end entry calls Release;
//   - a lease neither renewed nor released expires: Sweep (run by Run)
//     ends it with source TTL. A dead Envoy's permits come back this way
//     within one TTL of their last renewal, whatever its node id;
//   - a periodic entry whose token the ledger does not hold (the daemon
//     restarted since the grant) or whose lease expired while the request
//     still ran is Adopted: registered under its own token, so that the
//     bulkhead counts the running request again.
//
// Close releases everything at shutdown. The ledger does not interpret
// permits: it calls Releaser.Release once and ignores its result. Memory is
// the lease store of the in-process admission backend (package admission),
// and of the permits a Redis replica admits alone.
//
// # Lease rules
//
// The rules every part of the daemon applies to leases live here, once:
// Heartbeat (whether periodic entries renew leases, the adoption window,
// when a permit never renewed shows that its Envoy sends no periodic
// entries), SilentNodes (the nodes seen not to, whose permits get the long
// lease) and EndedTokens (requests ended that a late periodic entry must
// not adopt). Result is the one outcome of a release or a renewal, in
// every backend.
//
// # Exactly once
//
// A lease is live while its entry is in its shard's map. Every way of ending
// a lease (Release, Sweep, Close) removes the entry from that
// map while holding the shard's mutex, and only the goroutine that removed
// it calls Releaser.Release, after unlocking. Mutual exclusion orders the
// removals of one shard, and a removed entry is never found again, so
// Releaser.Release is called at most once per grant whatever calls race. It
// is called at least once as long as the owner runs Run (or calls Sweep)
// or calls Close: every lease has a finite expiry. Grant inserts the entry
// before it returns the token, so the insertion happens before any Release
// that carries the token: a token handed out by Grant is never reported
// Unknown while its lease is live. For one lease, Releaser.Release happens
// before Observer.Ended, and both happen before the call that ended the
// lease returns. Close makes later Grants fail with ErrClosed; a Grant racing
// with Close either fails or is ended by it.
//
// # Duplicates and unknown tokens
//
// A token that is not 22 characters of the URL-safe base64 alphabet in
// canonical form is Unknown at once, without a map lookup. Each shard
// remembers the tokens of its most recently ended leases (WithTombstones:
// n = 4096 per shard by default, kept as two generations of n/2, so at least
// the last n/2 and at most the last n) with what ended them, so that a
// second release of the same token is reported Duplicate, or Expired when
// its lease had ended by expiry (an end entry arriving after its permit was
// reclaimed: its Envoy does not renew it). Renew reports the same. Once a
// token has been forgotten, a release of it is reported Unknown: these
// outcomes differ only for metrics and adoption, never in effect, as none
// releases anything.
//
// # Concurrency and memory
//
// A Memory is safe for concurrent use. There is no process-wide lock: leases
// live in N shards (WithShards, 64 by default, a power of two) chosen from
// the token's bytes, and each shard has its own mutex, map and
// indexed min-heap on expiry (so removing any lease is O(log n) and the heap
// never holds stale entries). The lease cap is one atomic counter. There is
// no timer or goroutine per lease: one Run loop sweeps. Long operations
// (Sweep, Close) work in bounded batches so that they never
// hold a shard lock for long. Releaser.Release and Observer methods are
// called outside every ledger lock.
//
// Memory is bounded by the lease cap (WithMaxLeases, 1,000,000 by default;
// a lease costs a few hundred bytes with its map, heap and token) plus
// shards x tombstones remembered tokens (16-byte keys in Go maps, roughly
// 20-40 bytes each: about 10 MB at the defaults, when full), plus a per-shard
// cache of at most 64 recycled entries. Maps and heaps keep the capacity of
// their peak, which the cap bounds.
package permit
