// Package sizing recommends a bulkhead's max_concurrent and max_queue from
// what it observed: how many requests ended and how long they held their
// permits (from the access log), and the peak of permits in use each
// second (sampled from the limiter). It imports neither gRPC nor
// Prometheus.
//
// # Model
//
// An Observer keeps, per bulkhead, the last History seconds in one bucket a
// second: requests ended, their total hold time, the peak in use, and the
// permits in use sampled four times a second. For a window (the last
// Params.Window, at most History) a Suggestion takes:
//
//   - the throughput λ (requests ended per second, over the seconds that
//     saw any, less the first and last of them, partial seconds) and the
//     mean hold time W over the window: Little's law gives the concurrency
//     that throughput needs, L = λ·W;
//   - the peak in use over the window and the p99 of the samples (P99);
//   - max_concurrent = ceil(max(L · (1 + headroom), P99)): what Little's law
//     says plus the headroom, but never below what the traffic held 99% of
//     the time;
//   - max_queue = ceil(max_wait · max_concurrent / W), the waiters that the
//     recommended limit serves within max_wait (more would time out anyway);
//     with max_wait 0 the current max_queue is kept.
//
// It refuses (ErrTooLittleTraffic) when the window holds fewer than
// Params.MinRequests ended requests.
//
// The Observer also counts how each bulkhead's requests ended (success,
// failure, client abort) since it was first observed: it hears of every
// end, and the admin API shows the counts (Outcomes). The metrics count the
// same ends for Prometheus on their own; they store nothing others read.
//
// With Peers (several replicas enforcing one limit, each hearing only its
// share of the access logs), the requests that ended at the other replicas
// are added to this one's, second by second, before any of the above; a
// suggestion whose peers cannot be read is refused. The permits in use are
// whatever the Sampler given to Run counts: this process's limiters
// (LimiterSampler), or the mesh's count.
//
// # Concurrency
//
// Observer is safe for concurrent use; each bulkhead's history has its own
// mutex, and the map of histories its own.
package sizing
