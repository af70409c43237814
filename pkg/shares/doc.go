// Package shares hands each Envoy a share of a bulkhead's limit that its
// own circuit breaker enforces, so that a request far from the limit pays
// no ext_authz hop and no access-log entry: Bulkhead serves the Envoys a
// runtime layer over RTDS (the key circuit_breakers.<cluster>.default.
// max_requests of the bulkhead's share cluster) and learns what each one
// uses from its load reports (LRS, total_requests_in_progress of that
// cluster).
//
// # The invariant
//
// Every share is backed by permits held in the bulkhead's limiter
// (Limiter.Hold), so Σ shares + strict permits ≤ the limit at every
// instant, and the limiter's own counts show it:
//
//   - growing a share takes the permits first, then pushes the larger
//     max_requests;
//   - shrinking pushes the smaller one and gives permits back only once
//     the Envoy has acknowledged it and a load report generated after the
//     acknowledgement shows its requests in flight at or below what is
//     kept (an Envoy's in-flight count never grows above its circuit
//     breaker's threshold, and above it only falls);
//   - an Envoy that stops acknowledging, or whose stream ends, keeps its
//     share in the ledger until its runtime layer's TTL has run out at the
//     Envoy (its own clock, counted from the last response it can have
//     received) and the requests it admitted under it have ended (the
//     share route's timeout, Settings.MaxRequest), with a margin for
//     clock-rate drift.
//
// # Critical shares
//
// A bulkhead's critical routes have a share cluster of their own
// (CriticalCluster: the share cluster and "_critical"), so an Envoy that
// has one (it names it in its load reports) gets a critical share beside
// its normal one: its own key in the layer, its own strict key
// (CriticalStrictKey), its own requests in flight. Critical shares are
// held at priority critical and may use the critical reserve; normal
// shares never do: they are held while fewer than normal's ceiling plus
// the permits held for critical shares are in use (Limiter.HoldWithin),
// so the reserve stays for critical requests, under a share or strict,
// and a critical share's headroom sits in it. Both follow the rules
// above, each against its own cluster's reports.
//
// The layer is sent as an xDS Resource with a TTL: an Envoy that hears
// nothing from Bulkhead for Settings.TTL drops it, and its static layer
// routes the bulkhead's requests through ext_authz again (strict). An
// Envoy that reconnects tells, in its request's version_info, the layer it
// runs with: a restarted daemon adopts those shares before it pushes.
//
// # Modes
//
// A bulkhead in mode shares always hands out shares; in mode auto it
// switches to strict (the layer routes its requests through ext_authz
// again, and the shares drain as above) when demand nears the limit, and
// back with hysteresis. See Settings and Policy.
package shares
