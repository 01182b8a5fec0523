#!/usr/bin/env bash
# Builds the Sluice image with podman (or buildah) from this checkout:
#   docs/deploy/build-image.sh [tag]       (default sluice:<release>)
# The binary is built here, static, and copied in with the CA bundle of
# this machine; the Containerfile pulls no base image. PODMAN may name
# the builder and its options, such as "podman --storage-driver vfs".
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^## \(v[0-9][0-9.]*\).*/\1/p' CHANGELOG.md | head -1)
tag=${1:-sluice:$version}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -ldflags=-s -o "$ctx/sluice" ./cmd/sluice
cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
cp docs/deploy/sluice.yaml "$ctx/"
cp cmd/sluice/limits.example.yaml "$ctx/limits.yaml"
# /bin/ratelimit, a link to the binary: envoyproxy/ratelimit's command, as
# Envoy Gateway's Deployment runs it (a tar, so that ADD keeps the link).
mkdir -p "$ctx/links/bin"
ln -s /usr/local/bin/sluice "$ctx/links/bin/ratelimit"
tar -C "$ctx/links" -cf "$ctx/links.tar" bin
${PODMAN:-podman} build --isolation chroot -f docs/deploy/Containerfile -t "$tag" "$ctx" >&2
echo "$tag"
