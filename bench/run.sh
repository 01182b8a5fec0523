#!/usr/bin/env bash
# Runs every Sluice benchmark and prints the markdown that BENCHMARKS.md
# quotes; a copy goes to bench/results/ (not committed). About 4 minutes
# on 2 cores. Needs Go, redis-server and redis-benchmark (Debian:
# redis-server and redis-tools, installed here when missing).
#
#   bench/run.sh                      everything
#   bench/run.sh memory|redis-go|redis  one part
#
# Every part measures the working tree, so after a change to the stores or
# their scripts, re-run it and paste the new tables into BENCHMARKS.md.
# Each run waits (at most 10s) for the rest of the machine to be idle and
# reports the CPU other processes used meanwhile: on a shared machine,
# re-run when that column is not near 0.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
  echo "run.sh: installing redis-server and redis-tools" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
fi
part=${1:-all}
mkdir -p results
out=results/$(date -u +%Y%m%dT%H%M%SZ)-$part.md
{
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$( (git status --porcelain -- .. 2>/dev/null || true) | (grep -cv '^?? bench/results' || true) )
  echo "<!-- bench/run.sh $part: commit $rev, $dirty uncommitted paths, $(nproc) cores, $(go version | cut -d' ' -f3), $(redis-server --version | cut -d' ' -f3), $(date -u +%FT%TZ) -->"
  echo
  if [ "$part" = all ] || [ "$part" = memory ]; then
    echo "## Memory store (store/memory BenchmarkDecide)"
    echo
    go run ./cmd/gobench -pkg ./store/memory -bench '^BenchmarkDecide$' -benchtime 200ms -rounds 5 -layout memory -raw "$out.memory.txt"
  fi
  if [ "$part" = all ] || [ "$part" = redis-go ]; then
    echo "## Redis store, Go benchmarks (store/redis BenchmarkDecide)"
    echo
    go run ./cmd/gobench -pkg ./store/redis -bench '^BenchmarkDecide$' -benchtime 500ms -rounds 2 -layout redis -raw "$out.redis.txt"
  fi
  if [ "$part" = all ] || [ "$part" = redis ]; then
    echo "## Redis store against redis_rate and redis-benchmark (bench/cmd/redisbench)"
    echo
    go run ./cmd/redisbench -flush-delay 0  # redis.Open already sets MaxFlushDelay (DefaultMaxFlushDelay)
  fi
} | tee "$out"
echo "run.sh: wrote bench/$out" >&2
