// Package version says which build of Bulkhead is running: the module
// version and the VCS revision the Go toolchain stamped into the binary
// (runtime/debug.ReadBuildInfo). It is the one home of the `--version`
// line that bulkhead and bulkheadctl print. Its functions are pure and
// safe for concurrent use.
package version
