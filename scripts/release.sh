#!/usr/bin/env bash
# Builds a release of the checkout: static, stripped binaries stamped with
# the git-describe version, their SHA256SUMS, and the container image when a
# Docker engine is there (otherwise the command that builds it is printed).
# Nothing is published: dist/VERSION/ is what a release would upload.
#
#   scripts/release.sh                       # every platform below
#   PLATFORMS=linux/amd64 scripts/release.sh # just one
#   OUT=/tmp/dist scripts/release.sh         # elsewhere than dist/
#
# The version is `git describe --tags --always --dirty`: the tag at a tagged
# commit (v1.2.0), else the last tag, the commits since and the commit
# (v1.2.0-3-g3f2a1b9), or the commit alone before the first tag; -dirty
# when the tree has uncommitted changes. Tag a release first:
# git tag -a v1.2.0 -m v1.2.0.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$PATH"
# A release is built from the product's go.mod alone, never the workspace
# (go.work) that adds the benchmark's and the browser tests' modules.
export GOWORK=off
VERSION=$(git describe --tags --always --dirty)
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
OUT=${OUT:-dist}/$VERSION

mkdir -p "$OUT"
for platform in $PLATFORMS; do
  goos=${platform%/*} goarch=${platform#*/}
  bin=idempotency-proxy-$VERSION-$goos-$goarch
  echo "release.sh: $bin"
  # The README's release build: no cgo, trimmed paths, stripped, stamped.
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -tags grpcnotrace -trimpath \
    -ldflags "-s -w -X main.version=$VERSION" -o "$OUT/$bin" ./cmd/idempotency-proxy
done
(cd "$OUT" && sha256sum idempotency-proxy-* >SHA256SUMS)
echo "release.sh: $OUT/SHA256SUMS"

image=(docker build --build-arg "VERSION=$VERSION" -t "idempotency-proxy:$VERSION" .)
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  "${image[@]}"
else
  echo "release.sh: no Docker engine here; build the image with: ${image[*]}"
fi
