#!/usr/bin/env bash
# The whole test suite: installs redis-server (Debian) when it is missing,
# then vets and runs every test with the race detector.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "test.sh: installing redis-server and redis-tools" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
fi
go vet ./...
go test -race -count=1 ./... "$@"
