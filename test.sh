#!/usr/bin/env bash
# The whole test suite: installs what the tests start (Debian's
# redis-server and redis-tools, and chromium, which opens the simulator's
# report) when it is missing, then vets and runs every test with the race
# detector.
set -euo pipefail
cd "$(dirname "$0")"
need=()
command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || need+=(redis-server redis-tools)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
go vet ./...
go test -race -count=1 ./... "$@"
