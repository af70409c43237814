// Not Go: the npm tool of make dashboard-render. This go.mod makes the
// directory a module of its own, so that the main module's ./... (go vet,
// golangci-lint, go test) stops here and never reaches the Go files an npm
// package ships in node_modules (flatted does).
module bulkhead.invalid/dashboard-render

go 1.26.8
