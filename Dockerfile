# syntax=docker/dockerfile:1
#
# Container image for idempotency-proxy: a static binary on distroless, run as
# a non-root user. Build with:
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t idempotency-proxy .

FROM golang:1.26 AS build
WORKDIR /src

# Download modules in their own layer so that source edits do not refetch them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
ARG VERSION=dev
# Static build (no cgo) so the binary runs on distroless/static without libc.
# This is the same command the README documents for a local build.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -tags grpcnotrace -trimpath -ldflags "-s -w -X main.version=$VERSION" -o idempotency-proxy ./cmd/idempotency-proxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/idempotency-proxy /usr/local/bin/idempotency-proxy
# The example configuration is a working default (in-memory store, upstream on
# 127.0.0.1:3000); mount a ConfigMap over /etc/idempotency-proxy to replace it.
COPY config.example.yaml /etc/idempotency-proxy/config.yaml
# 65532 is distroless's "nonroot"; stated numerically so that Kubernetes'
# runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
# 8080: proxy listener (what the Service targets). 9090: admin (/metrics, /healthz, /readyz).
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/idempotency-proxy", "--config", "/etc/idempotency-proxy/config.yaml"]
