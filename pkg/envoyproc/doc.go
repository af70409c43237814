// Package envoyproc runs a real Envoy process for the demo and the
// end-to-end tests: it finds the binary, starts Envoy on a rendered config,
// waits until the admin interface reports ready, reads listener addresses and
// stats back, and stops it so that no Envoy outlives its owner.
//
// Envoy runs in its own process group (killed as a whole on Kill and on a
// timed-out Stop) and, on Linux, with a parent-death signal so that it also
// dies if the owning process is killed.
//
// A Proc is safe for concurrent use. Its one background goroutine (waiting
// for the process to exit) ends when the process does; Stop or Kill make it
// end.
package envoyproc
