// Package version says which build of Bulkhead is running. It is the one
// home of the `--version` line that bulkhead and bulkheadctl print, and of
// the link-time variables a release build stamps:
//
//	-X github.com/bulkhead-mesh/bulkhead/pkg/version.version=v0.3.1
//	-X github.com/bulkhead-mesh/bulkhead/pkg/version.revision=<full commit hash>
//
// (.goreleaser.yaml and the Dockerfile pass them; a test in deploy/ keeps
// both in step with these names). Unstamped, the line comes from the build
// information the Go toolchain records (runtime/debug.ReadBuildInfo): the
// module version, and the VCS revision when VCS stamping was on. Its
// functions are pure and safe for concurrent use.
package version
