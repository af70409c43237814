// Package redisledger is the permit ledger that many replicas share, on
// Redis (or a Redis-compatible server such as Valkey): one limit per
// bulkhead for the whole mesh, whichever replica a Check or an access-log
// entry reaches.
//
// Ledger keeps the admission contract (admission.Ledger: Admit in
// acquire.go, Release and Renew through the batcher in batch.go, Holders),
// and Fallback wraps it with the unavailable policy (fail closed, fail
// open); Capacity, the capacity leases, sits over the Fallback when they
// are on. The servers are given one of them and do not know it is Redis.
//
// # Model
//
// Everything a bulkhead's admission depends on lives in Redis under one hash
// tag (scripts/common.lua documents the keys): the permits in use with their
// leases (expiry on Redis's clock), the global wait queue (one sorted set
// per class, FIFO by a sequence number), the tenants' compartments, tenant
// counts, and tombstones of recently ended leases. Each operation is one Lua script, so it is atomic:
//
//   - acquire puts an arrival whose tenant holds its limit (in use and in
//     the queue) in the tenant's compartment, outside the bulkhead's queue;
//     otherwise it grants at once when the class ceiling allows and no
//     waiter of the same or a higher class waits, or queues (shedding the
//     youngest waiter of the lowest class strictly below when the queue is
//     full), or rejects;
//   - release ends the lease and, in the same script, hands the freed
//     permit to the first waiter its ceiling allows (pump), lets the
//     compartment of a tenant that freed a slot into the queue, then
//     publishes a wake-up on each granted waiter's replica channel;
//   - renew extends a lease, or adopts the permit of a running request the
//     ledger lost (expired, or Redis lost its data: a bulkhead whose state
//     is missing starts a recovery window during which unknown tokens are
//     adopted and nobody new is admitted);
//   - leave takes a waiter out when its wait ends, keeping or giving back a
//     permit granted at that moment;
//   - state, run by every replica each tick, reclaims expired leases, sets
//     the counts to the sets they count, and serves the queue (permits that
//     expired, a recovery window that ended).
//
// Every script is idempotent per token: run twice (go-redis's cluster
// client retries a command after a broken connection, though the script
// ran), it answers as the first run did and counts nothing again. Every
// release, of a token known or not, leaves a tombstone: a late periodic
// entry of a request that ended is never adopted.
//
// A waiter costs Redis nothing while it waits: it is woken by Pub/Sub, and a
// lost wake-up only delays it to the end of its wait, when leave finds the
// permit granted. Every script sweeps expired leases first, so capacity
// freed by expiry is never missed by an arrival. A lease is swept only
// expiryGrace after its expiry (the in-memory ledger's sweep interval): a
// periodic entry a little late renews it rather than adopting it again.
//
// # Strictness
//
// The permits of a bulkhead, summed over replicas, never exceed the class
// ceiling the deciding replica was configured with, because every grant is
// decided inside one script against the count Redis holds. Adoption counts
// running requests past the limit (they run already), as in the in-memory
// ledger. What Redis cannot guarantee is durability: a failover can lose
// the last writes (replication is asynchronous), and a restart without
// persistence loses everything; heartbeats rebuild the count within a few
// intervals (see docs/redis.md for the measured cost).
//
// # Availability
//
// A call that fails or outlives the ledger's timeout switches the replica
// to Unavailable: Checks get the on_unavailable policy (Fallback) without
// calling Redis, and Run probes Redis each Tick/4; when it answers,
// Strict resumes. With capacity leases a replica cut off admits within the
// lease it holds until the lease's end (Capacity), and the policy applies
// beyond it; nothing admitted meanwhile needs handing to Redis afterwards,
// since Redis counted the lease all along.
// A Check's own deadline cuts its calls shorter than the timeout, so that
// a slow Redis never holds it past that deadline; a call that deadline
// ends is that Check's timeout (ErrCallerDeadline), never Redis's outage.
// Only calls that had the whole timeout judge Redis: a Redis that is gone
// is found by the next of them (the ticker's, at the latest one Tick on).
//
// # Capacity leases
//
// Capacity (ledger.redis.capacity_leases, on by default) is a third
// backend behind the contract, over the Fallback. Redis hands each replica
// a lease of k permits per bulkhead (scripts/lease.lua), counted in Redis as
// held (CL, and their sum leased in the bulkhead's state); the replica
// admits from it alone, with the limiter it uses in memory mode: an
// admission.Memory over a registry whose limits follow the leases (fail
// fast: no local queue). What the lease has no room for takes the
// per-request path (the Fallback: today's scripts and global queue), and so
// does every request of a tenant (a tenant's limit is counted in Redis). A
// bulkhead with tenant compartments or in a dry run holds no lease.
// Releases and renewals of the permits admitted from a lease are served
// here; heartbeats and adoption stay per permit at the replica.
//
// The invariant is inuse + Σ held <= limit: every per-request grant (and
// every grant of a waiter) needs the limit free of every lease, and a lease
// grows only from what the limit leaves after the per-request permits and
// the other leases. A lease never falls below what its replica may have in
// use (need: its local limit, or its permits in use if more), so shrinking
// takes two calls: the new target (the replica's local limit from then on),
// then the give-back of what is not in use. Permits in use beyond the
// target come back as their requests end (a release kicks the loop).
// While the loop's calls for a bulkhead run, permits may be in transit,
// counted by neither side (a shrink applied here before its give-back
// lands) or by Redis but not yet here (a grant not yet applied): a request
// the lease has no room for then waits for the loop's answers (at most one
// call's Timeout, not while Redis is unreachable) and asks the lease again
// before the per-request path, so that it is not refused at the limit with
// a permit in transit.
//
// Each replica renews its leases each Tick (1 s), all of them in one round
// of calls: the lease script takes many bulkheads' keys and arguments
// (leaseBatch, 64, per call; one call per bulkhead on a Redis Cluster,
// whose bulkheads live in different slots), all sent in one round trip,
// and answers each bulkhead as if called alone. Each lease reports its
// demand (a lease idle for idleRounds rounds is given back and parked,
// with no call until a Check finds it wanting, which wakes the loop at
// once): the peak in use since its last call plus its admissions the
// lease had no room for (overflow). Far from the limit (no waiter, no
// recovery window, and inuse + 2·Σ demand <= limit) a lease is twice its
// replica's demand plus an equal share of half of what is left: a replica
// can double its load between two renewals without a Redis call, and half
// the slack stays free for per-request grants and for replicas that start.
// Near the limit a lease shrinks to its replica's peak, and with waiters in
// the queue to what it uses now and never grows: the rest is decided per
// request, in the global queue's order. A lease smaller than the smallest
// one whose reserves leave a best_effort permit is not granted (it would
// hold capacity only some classes may use). Class ceilings below the limit
// are checked per request against what the leases use (as each replica last
// reported, this replica's own as of now), and within a lease by its own
// reserves (fractions of k): approximate across replicas, exact for one.
//
// A lease lasts leaseTicks (3) ticks on Redis's clock, twice that when
// granted far from the limit (renewed every leaseTicks ticks while its
// replica's demand holds: steady). The replica stops
// admitting from it at its own monotonic clock's reading when it sent the
// call that set it, plus the lease, less a drift margin of 1% of it (20 times the
// 500 ppm a clock under NTP may run off): its end comes before Redis's,
// whatever the network delay, as long as the clocks' rates differ by less
// than 1%; no synchronised clocks are needed. Redis reclaims a lease only
// after its end by its own clock (sweep, in every script), then pauses the
// bulkhead's admissions for the recovery window and adopts unknown tokens
// (the cut-off or dead replica's requests may still run; their periodic
// entries reach replicas that reach Redis). A replica cut off thus admits
// within its lease until its end, then only by its on_unavailable policy
// beyond it. The lease script is idempotent per (replica, bulkhead, epoch):
// a call run again (same seq) answers as the first run and sets nothing
// again, an older one is stale, and a later call of an epoch Redis no
// longer holds is told it is lost (the replica starts a new epoch from its
// permits in use, counted past the limit if need be). A call that fails
// leaves every lease in it standing until its end by the replica's clock,
// its demand sent with the next call; a bulkhead whose part of a call
// fails (a command that failed for it in Redis) or is malformed is the
// same, alone: the others' answers are applied.
//
// An entry may reach another replica than the one that admitted its permit
// from its lease; Redis does not know the token, and forwards the entry on
// the wake-up channel of the replica its tag names (the tokens a lease
// admits end with the first 4 bytes of the SHA-1 of their replica's id,
// permit.TagOf), while that replica holds a lease, even in an adoption
// window: its lease counts the permit, and adopting it too would count it
// twice. A token whose tag names no holder is adopted in the window, and
// otherwise forwarded to every holder. A replica that cannot reach Redis
// hears no forwarded entry either, so its permits do not expire while it
// is not strict (permit.Memory.HoldExpiries): one whose heartbeats went to
// another replica may still run, and its slot must not admit again before
// the lease's end. That needs the replica to find Redis gone (a tick and a
// call: 1.05 s by default) before such a permit would expire (a heartbeat
// TTL less an interval after the cut: 2 s by default).
//
// A Ledger, a Fallback and a Capacity are safe for concurrent use. Run owns
// its goroutines (the wake-up subscriber, the batcher and the ticker; the
// Capacity's is the lease loop) and returns when its context ends.
package redisledger
