#!/usr/bin/env bash
# Admission queue throughput next to bare XADD, in one run on one machine:
#  1. redis-benchmark against a fresh redis-server: XADD one entry per
#     call, 50 clients, without pipelining and with 16 commands pipelined;
#  2. the queue package's Go benchmarks, each against its own fresh
#     redis-server (and the memory twin): Add from parallel producers,
#     and Drain with 1 and 4 workers.
#
#   bench/queue.sh [N]      N entries per figure (default 200000)
set -euo pipefail
n=${1:-200000}
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/pid" >/dev/null
trap 'kill "$(cat "$dir/pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
for i in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
for p in 1 16; do
  echo "redis-benchmark XADD, 50 clients, pipeline $p:"
  redis-benchmark -p "$port" -n "$n" -c 50 -P "$p" -q XADD bench:xadd:$p '*' job resize id 42 | tr '\r' '\n' | grep -v '^$' | tail -1
done
cd "$top"
go test -run '^$' -bench 'BenchmarkAdd|BenchmarkDrain' -benchtime "${n}x" ./queue/ | grep -E '^Benchmark|^cpu'
