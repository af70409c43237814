// Package httpbulkhead puts Bulkhead's limiter (pkg/bulkhead) on net/http,
// with semaphore isolation, on both sides of a service:
//
//   - Handler (server side) picks a bulkhead per request from a key
//     function (say, per route), takes a permit for the request's class
//     (from the x-bulkhead-priority header) and holds it while the wrapped
//     handler runs. A rejection is answered by the middleware: 503 (or the
//     configured status) with retry-after, x-bulkhead-reason, x-bulkhead
//     and the sidecar's JSON body {"error","bulkhead","reason"}.
//   - Transport (client side) is an http.RoundTripper per dependency: each
//     request holds a permit of that dependency's limiter from before it is
//     sent until its response body is read to the end or closed. A
//     rejection is an error wrapping the bulkhead's sentinel, so
//     errors.Is(err, bulkhead.ErrQueueFull) holds on what http.Client.Do
//     returns.
//
// # Connection limits
//
// An http.Transport has limits of its own that must agree with the
// bulkhead. MaxIdleConnsPerHost defaults to 2: with a limit of 50, 48
// connections would be closed after every burst and dialled again.
// MaxConnsPerHost, when it is below the bulkhead's limit, is a second,
// hidden queue without priorities, bounds or metrics. Transport therefore
// runs requests on a clone of the given *http.Transport with both set to
// the limiter's max_concurrent (MatchTransport), and makes a new clone when
// the limit changes (a Resize or a Registry reload), so the bulkhead is the
// only place where requests wait. Over HTTP/1.1 a request in flight uses
// one connection, so connections never exceed the limit; over HTTP/2 the
// cap bounds connections and the bulkhead bounds streams.
//
// # Invariants
//
//   - A request holds at most one permit, released exactly once: when its
//     RoundTrip fails, when its body reports EOF or an error, or when its
//     body is closed, whichever is first. A handler's permit is released
//     when the wrapped handler returns or panics (the panic goes on).
//   - A request whose context ends while it waits holds no permit.
//   - Rejected requests never reach the wrapped handler or the network; a
//     rejected client request's body is closed, as RoundTrip must.
//
// Handler and Transport are safe for concurrent use. The priority header is
// trusted: strip or overwrite it where requests enter your network.
package httpbulkhead
