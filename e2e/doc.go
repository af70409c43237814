// Package e2e holds Bulkhead's end-to-end tests: a real Envoy 1.40
// (--concurrency 2) in front of test upstreams that count their own
// concurrent requests, talking to the real bulkhead binary. They are behind
// the build tag e2e and run by `make test`:
//
//	go test -race -tags e2e ./e2e/...
//
// Every test runs the shared invariant check on cleanup: no upstream ever
// saw more concurrent requests than its bulkhead's limit.
package e2e
