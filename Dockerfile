# syntax=docker/dockerfile:1
# The Bulkhead image: static binaries on distroless, running as non-root
# (uid 65532). Used by the Helm chart and docker-compose.yaml.
#
#   docker build -t bulkhead .
#
# The stage demo is docker-compose.yaml's demo upstreams and traffic
# (bulkhead-demo upstream, bulkhead-demo traffic); a plain build skips it.
#
# The build stage's commands are exercised by `go test ./deploy` (no Docker
# engine needed), so a broken build line fails the tests.

ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/bulkhead ./cmd/bulkhead
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/bulkheadctl ./cmd/bulkheadctl

# docker build --target demo -t bulkhead-demo .
FROM build AS demo-build
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/bulkhead-demo ./cmd/bulkhead-demo

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
