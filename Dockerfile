# syntax=docker/dockerfile:1
# The Bulkhead image: static binaries on distroless, running as non-root
# (uid 65532). Used by the Helm chart and docker-compose.yaml.
#
#   docker build -t bulkhead .
#
# A release stamps what `bulkhead --version` prints (pkg/version), as
# .goreleaser.yaml stamps the archives' binaries, and pins the image's
# timestamps to the commit's (BuildKit reads SOURCE_DATE_EPOCH):
#
#   docker build -t REGISTRY/bulkhead:0.3.1 \
#     --build-arg VERSION=v0.3.1 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) .
#
# The binaries are reproducible: the same Go (GO_VERSION, go.mod's), the
# same flags (-trimpath, -buildvcs=false, -ldflags) and the same sources
# give the same bytes as the release archives' linux binaries.
#
# The stage demo is docker-compose.yaml's demo upstreams and traffic
# (bulkhead-demo upstream, bulkhead-demo traffic); a plain build skips it.
#
# The build stage's commands are exercised by `go test ./deploy` (no Docker
# engine needed), so a broken build line fails the tests.

ARG GO_VERSION=1.26.8
# The build stage runs on the builder's platform and cross-compiles for the
# target's (docker buildx build --platform linux/amd64,linux/arm64), with
# no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Empty: not stamped, and --version falls back to the build information.
ARG VERSION=""
ARG REVISION=""
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w -X github.com/bulkhead-mesh/bulkhead/pkg/version.version=${VERSION} -X github.com/bulkhead-mesh/bulkhead/pkg/version.revision=${REVISION}" -o /out/ ./cmd/bulkhead ./cmd/bulkheadctl

# docker build --target demo -t bulkhead-demo .
FROM build AS demo-build
ARG VERSION=""
ARG REVISION=""
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w -X github.com/bulkhead-mesh/bulkhead/pkg/version.version=${VERSION} -X github.com/bulkhead-mesh/bulkhead/pkg/version.revision=${REVISION}" -o /out/bulkhead-demo ./cmd/bulkhead-demo

FROM gcr.io/distroless/static-debian12:nonroot AS demo
COPY --from=demo-build /out/bulkhead-demo /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/bulkhead-demo"]

# The Bulkhead image (the last stage: what docker build builds by default).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bulkhead /out/bulkheadctl /usr/local/bin/
USER 65532:65532
# gRPC (ext_authz, access log, health), HTTP (/metrics, /healthz, /readyz), admin.
EXPOSE 9001 9090 9091
ENTRYPOINT ["/usr/local/bin/bulkhead"]
CMD ["--config", "/etc/bulkhead/bulkhead.yaml"]
