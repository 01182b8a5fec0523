#!/usr/bin/env bash
# Benchmarks `sluice serve` (issue 6) over loopback, next to bare servers
# under the same load in the same run, and prints the markdown table that
# bench/NOTES.md quotes ("## Service (issue 6)"):
#
#   bench/serve.sh                        3 rounds of 5s per run, ~4 minutes
#   ROUNDS=1 DURATION=3s bench/serve.sh   shorter
#   RATE=20000 bench/serve.sh             the fixed-rate runs at 20,000/s
#
# Each round runs, each a warm-up of 1s then DURATION, 50 connections (HTTP: one TCP
# connection per worker, one request at a time; gRPC: 50 concurrent calls
# over 4 HTTP/2 connections), loopback only:
#   HTTP  bare net/http handler with a fixed JSON body | sluice memory | sluice redis
#   gRPC  bare ShouldRateLimit answering a fixed OK    | sluice memory | sluice redis
# Then one round of the same runs at a fixed RATE (default 10,000 req/s
# in all, spread over the 50 connections): latency well under capacity.
# CPU per check is the server process's utime+stime (/proc) over the
# measured window divided by the checks answered; "other CPU" is what the
# rest of the machine (neither the server nor loadgen, so Redis included)
# used meanwhile, in cores. Each run first waits (at most 20s) for the
# machine to be idle; on a shared machine, re-run when "other CPU" is not
# near 0 (Redis's own CPU is part of it in the Redis runs). Needs Go and
# redis-server.
set -euo pipefail
cd "$(dirname "$0")"
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-10000}
OUT=results.jsonl

. ./lib.sh # TMP, PIDS, cleanup on exit, freeport, waitport

(cd .. && go build -o "$TMP/sluice" ./cmd/sluice)
(cd cmd/loadgen && go build -o "$TMP/loadgen" .)
POLICY=$PWD/cmd/loadgen/limits.bench.yaml


RPORT=$(freeport)
redis-server --bind 127.0.0.1 --port "$RPORT" --save '' --appendonly no --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
RPID=$!; PIDS+=("$RPID"); waitport "$RPORT"

run() { # name api target-start-command...
  local name=$1 api=$2; shift 2
  local hp gp
  hp=$(freeport); gp=$(freeport)
  local cmd=("${@//HTTPPORT/$hp}"); cmd=("${cmd[@]//GRPCPORT/$gp}")
  local log=$TMP/$(echo "$name" | tr ' /' '__')
  "${cmd[@]}" >"$log.out" 2>"$log.err" &
  local pid=$!; PIDS+=("$pid")
  if [ "$api" = http ]; then waitport "$hp"; addr=127.0.0.1:$hp; else waitport "$gp"; addr=127.0.0.1:$gp; fi
  "$TMP/loadgen" idle -max 0.2 -timeout 20s
  "$TMP/loadgen" "$api" -addr "$addr" -c 50 -d "$DURATION" -pid "$pid" -name "$name" ${LOADARGS:-} >>"$TMP/$OUT"
  # Checks the store failed (answered by on_store_error, fail open): sluice only.
  local errs=0
  if [[ $name == *sluice* ]]; then
    errs=$(curl -s "http://127.0.0.1:$hp/metrics" | awk '/^sluice_store_errors_total /{print $2}')
  fi
  echo "${errs:-0}" >>"$TMP/$OUT.storeerrors"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

SERVE=("$TMP/sluice" serve --http 127.0.0.1:HTTPPORT --grpc 127.0.0.1:GRPCPORT --policy "$POLICY" --log-level warn)
all_runs() {
  run "http bare net/http" http "$TMP/loadgen" bare-http -addr 127.0.0.1:HTTPPORT
  run "http sluice memory" http "${SERVE[@]}" --store memory
  run "http sluice redis"  http "${SERVE[@]}" --store "redis://127.0.0.1:$RPORT/0"
  run "grpc bare"          grpc "$TMP/loadgen" bare-grpc -addr 127.0.0.1:GRPCPORT
  run "grpc sluice memory" grpc "${SERVE[@]}" --store memory
  run "grpc sluice redis"  grpc "${SERVE[@]}" --store "redis://127.0.0.1:$RPORT/0"
}
for round in $(seq "$ROUNDS"); do all_runs; done
OUT=rate.jsonl LOADARGS="-rate $RATE" all_runs

table() { # results-file
python3 - "$1" "$1.storeerrors" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
for r, e in zip(rows, open(sys.argv[2])):
    if float(e) > 0: r["statuses"]["store errors"] = int(float(e))
names, by = [], {}
for i, r in enumerate(rows):
    r["round"] = i // 6
    if r["name"] not in by:
        names.append(r["name"]); by[r["name"]] = []
    by[r["name"]].append(r)
bare = {"http": "http bare net/http", "grpc": "grpc bare"}
print("| run | req/s | vs bare | per round | p50 | p99 | server CPU per check | server CPU | other CPU | answers (all rounds) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for n in names:
    rs = by[n]
    api = n.split()[0]
    ratios = [r["rps"] / by[bare[api]][r["round"]]["rps"] for r in rs]
    med = lambda k: st.median(r.get(k, 0) for r in rs)
    ans = {}
    for r in rs:
        for k, v in r["statuses"].items(): ans[k] = ans.get(k, 0) + v
        if r.get("errors"): ans["errors"] = ans.get("errors", 0) + r["errors"]
    ratio = med('rps') / st.median(r["rps"] for r in by[bare[api]])
    spread = f"{100*min(ratios):.0f}–{100*max(ratios):.0f}%" if len(ratios) > 1 else ""
    print(f"| {n} | {med('rps'):,.0f} | {100*ratio:.0f}% | {spread} | {med('p50_us')/1000:.2f} ms | {med('p99_us')/1000:.2f} ms "
          f"| {med('cpu_us_per_req'):.1f} µs | {med('target_cpu_cores'):.2f} cores | {med('other_cpu_cores'):.2f} cores "
          f"| {', '.join(f'{k} {v}' for k, v in sorted(ans.items()))} |")
PY
}
echo "$ROUNDS rounds of $DURATION per run, 50 connections, as fast as answered; medians over the rounds (vs bare: the median req/s over the bare run's median; per round: the lowest and highest ratio of a run to its own round's bare run)."
echo
table "$TMP/results.jsonl"
echo
echo "At a fixed $RATE req/s in all over the 50 connections, $DURATION per run, one round:"
echo
table "$TMP/rate.jsonl"
