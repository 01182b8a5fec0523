#!/usr/bin/env bash
# Benchmarks `sluice serve` against envoyproxy/ratelimit, Envoy's reference
# rate limit service (built from its Go module, bench/cmd/envoyrl), and
# gubernator (bench/cmd/gubernator, counters in its own memory), on one
# redis-server, with the same limit, the same requests and the same load
# generator, in interleaved rounds; prints the tables BENCHMARKS.md quotes
# ("## Beyond one round trip (issue 13)"):
#
#   bench/envoy.sh                          3 rounds of 5s per run, ~10 minutes
#   ROUNDS=1 DURATION=3s bench/envoy.sh     shorter
#   SCENARIOS="allow deny" bench/envoy.sh   some of: allow steady deny hot override
#   STEADY_RATE=6000 bench/envoy.sh         the offered rate of the steady scenario
#   BASELINE=3e97dd7 bench/envoy.sh         also sluice built at that commit
#                                           ("sluice @3e97dd7"), in every scenario
#   PIN=1 bench/envoy.sh                    the load generator on CPU 0, the service
#                                           and Redis on CPU 1 (taskset)
#   PROCS=1 bench/envoy.sh                  both services with GOMAXPROCS=1 (the load
#                                           generator keeps every core)
#
# Every check is one descriptor, domain edge, remote_address=10.0.x.y (a
# path edge/remote_address/10.0.x.y for sluice), limited by a fixed window
# of 1 second in both services (Envoy's unit: second), over gRPC (Envoy's
# RLS v3 ShouldRateLimit, 50 concurrent calls on 4 connections) and HTTP
# (sluice POST /v1/check, Envoy POST /json; 50 keep-alive connections).
# The scenarios:
#   allow  1000 callers, a limit of 1,000,000/s: nothing is denied; sluice
#          exact (its default), and with lease: true on the node, with
#          redis.lease_for at its default (1s) and at 100ms; and the floor
#          (bench/cmd/floor: decode, one EVALSHA of a minimal fixed-window
#          script through rueidis, answer), the least an exact check costs
#          in Go on this Redis; and, keeping counters in memory,
#          gubernator (a cluster of one; a token bucket of the same limit
#          a second, since it has no fixed window) against sluice on its
#          memory store (sluice (memory))
#   steady the allow scenario's services at a fixed offered rate
#          (STEADY_RATE checks/s in all, default 6000, about half Envoy's
#          most here), for the latency a check adds below saturation
#   deny   1000 callers, a limit of 1/s each: nearly every check is denied
#          (the share is measured); Envoy with its local over-limit cache
#          (LOCAL_CACHE_SIZE_IN_BYTES) on and off, sluice with its own
#          over-limit cache on (the default) and off
#   hot    one caller, a limit of 100,000,000/s (far from it), the node
#          with lease: true for sluice (lease_for at its default, 1s, and
#          at 100ms); also a gRPC client that asks for
#          quota (x-sluice-quota) and admits from it as a proxy would, and,
#          on the library, bench/cmd/hotkey with leases against the same
#          Redis, next to the ceiling of the exact script on one key
#          (redis-benchmark replaying the exact EVALSHA, 50 connections,
#          16 pipelined), and 2 hotkey processes into a limit of 2,000,000
#          in a 1h window: what they admit is never above it
#   override the allow scenario's sluice, on Redis and on its memory store,
#          as it is and with every caller's key under an exact override
#          (a limit of 2,000,000/s, set through POST /admin/v1/overrides
#          before the load, and read back from a check's answer): what an
#          override in force costs a check of the service (issue 38)
# Redis is flushed before each run. CPU per check is the service process's
# utime+stime (/proc) over the measured window divided by the checks
# answered, and the same for redis-server. Envoy runs with
# REDIS_PIPELINE_WINDOW=$ENVOY_WINDOW (its README suggests 150-500us;
# "0" flushes every command at once) and REDIS_POOL_SIZE=$ENVOY_POOL.
# Needs Go, redis-server and python3.
set -euo pipefail
cd "$(dirname "$0")"
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-allow deny hot}
ENVOY_WINDOW=${ENVOY_WINDOW:-150us}
ENVOY_POOL=${ENVOY_POOL:-10}
STEADY_RATE=${STEADY_RATE:-6000}

. ./lib.sh # TMP, PIDS, cleanup on exit, freeport, waitport

(cd .. && go build -o "$TMP/sluice" ./cmd/sluice)
if [ -n "${BASELINE:-}" ]; then
  git -C .. worktree add -q --detach "$TMP/base" "$BASELINE"
  (cd "$TMP/base" && go build -o "$TMP/sluice-base" ./cmd/sluice)
  git -C .. worktree remove --force "$TMP/base"
fi
(cd cmd/loadgen && go build -o "$TMP/loadgen" .)
(cd cmd/envoyrl && go build -o "$TMP/envoyrl" .)
go build -o "$TMP/floor" ./cmd/floor
go build -o "$TMP/hotkey" ./cmd/hotkey
(cd cmd/gubernator && go build -o "$TMP/gubernator" .)

RPORT=$(freeport)
SIDE=() GEN=()
if [ "${PIN:-}" = 1 ]; then SIDE=(taskset -c 1) GEN=(taskset -c 0); fi
SVC=(env) # how the services start: GOMAXPROCS=$PROCS when set
if [ -n "${PROCS:-}" ]; then SVC=(env GOMAXPROCS="$PROCS"); fi
"${SIDE[@]}" redis-server --bind 127.0.0.1 --port "$RPORT" --save '' --appendonly no --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
RPID=$!; PIDS+=("$RPID"); waitport "$RPORT"

limits() { # scenario -> limit per second
  case $1 in allow | steady | override) echo 1000000 ;; deny) echo 1 ;; hot) echo 100000000 ;; esac
}
keys() { case $1 in hot) echo 1 ;; *) echo 1000 ;; esac; }

configs() { # scenario: writes the policy of both services
  local lim lease=false; lim=$(limits "$1")
  [ "$1" = hot ] && lease=true
  mkdir -p "$TMP/rt/ratelimit/config"
  for f in limits:$lease limits-lease:true; do # sluice's policy, and one with leases
    cat >"$TMP/${f%%:*}.yaml" <<YAML
schema:
  edge:
    children:
      remote_address:
        children:
          "*":
            lease: ${f#*:}
            limits: {algorithm: fixed_window, limit: $lim, window: 1s}
YAML
  done
  cat >"$TMP/rt/ratelimit/config/edge.yaml" <<YAML
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: $lim}
YAML
}

run() { # scenario service api
  local scenario=$1 service=$2 api=$3 hp gp pid quota=()
  [[ $service == *"quota client"* ]] && quota=(-quota 1000)
  hp=$(freeport); gp=$(freeport)
  redis-cli -p "$RPORT" flushall >/dev/null
  case $service in
    sluice*)
      local cache=100000 policy=$TMP/limits.yaml leasefor=() store=redis://127.0.0.1:$RPORT/0
      [[ $service == *"(memory"* ]] && store=memory
      [[ $service == *"cache off"* ]] && cache=-1
      [[ $service == *"(leases"* ]] && policy=$TMP/limits-lease.yaml
      [[ $service == *"lease_for 100ms"* ]] && leasefor=(SLUICE_REDIS_LEASE_FOR=100ms)
      local bin=$TMP/sluice
      [[ $service == *"@"* ]] && bin=$TMP/sluice-base
      env SLUICE_ADMIN_TOKEN=bench SLUICE_REDIS_OVER_LIMIT_CACHE=$cache "${leasefor[@]}" "${SIDE[@]}" "${SVC[@]}" "$bin" serve --http "127.0.0.1:$hp" --grpc "127.0.0.1:$gp" \
        --policy "$policy" --store "$store" --log-level warn >"$TMP/svc.log" 2>&1 &
      ;;
    floor)
      "${SIDE[@]}" "${SVC[@]}" "$TMP/floor" -http "127.0.0.1:$hp" -grpc "127.0.0.1:$gp" -redis "127.0.0.1:$RPORT" -limit "$(limits "$scenario")" >"$TMP/svc.log" 2>&1 &
      ;;
    gubernator)
      env GUBER_PEER_DISCOVERY_TYPE=none GUBER_LOG_LEVEL=warn GUBER_GRPC_ADDRESS="127.0.0.1:$gp" GUBER_HTTP_ADDRESS="127.0.0.1:$hp" \
        "${SIDE[@]}" "${SVC[@]}" "$TMP/gubernator" >"$TMP/svc.log" 2>&1 &
      ;;
    envoy*)
      local cache=0
      [[ $service == *"cache on"* ]] && cache=104857600
      env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$RPORT" \
        REDIS_PIPELINE_WINDOW="$ENVOY_WINDOW" REDIS_POOL_SIZE="$ENVOY_POOL" LOCAL_CACHE_SIZE_IN_BYTES=$cache \
        RUNTIME_ROOT="$TMP/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
        HOST=127.0.0.1 PORT="$hp" GRPC_HOST=127.0.0.1 GRPC_PORT="$gp" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(freeport)" \
        "${SIDE[@]}" "${SVC[@]}" "$TMP/envoyrl" >"$TMP/svc.log" 2>&1 &
      ;;
  esac
  pid=$!; PIDS+=("$pid")
  local addr args=(-c 50 -d "$DURATION" -pid "$pid" -redis-pid "$RPID" -keys "$(keys "$scenario")")
  [ "$scenario" = steady ] && args+=(-rate "$STEADY_RATE")
  waitport "$hp"
  [[ $service == *overrides* ]] && set_overrides "$hp" "$(keys "$scenario")"
  if [ "$api" = http ]; then
    addr=127.0.0.1:$hp
    if [ "$service" = gubernator ]; then
      args+=(-path /v1/GetRateLimits -body "{\"requests\": [{\"name\": \"edge\", \"unique_key\": \"{ip}\", \"hits\": 1, \"limit\": $(limits "$scenario"), \"duration\": 1000}]}")
    elif [[ $service == sluice* || $service == floor ]]; then
      args+=(-path /v1/check -body '{"path": ["edge", "remote_address", "{ip}"]}')
    else
      args+=(-path /json -body '{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "{ip}"}]}]}')
    fi
  else
    waitport "$gp"; addr=127.0.0.1:$gp
    [ "$service" = gubernator ] && args+=(-gubernator -limit "$(limits "$scenario")")
  fi
  "$TMP/loadgen" idle -max 0.2 -timeout 20s
  "${GEN[@]}" "$TMP/loadgen" "$api" -addr "$addr" -name "$scenario|$service|$api" "${args[@]}" "${quota[@]}" >>"$TMP/results.jsonl"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

# set_overrides port n: an exact override of 2,000,000/s on each of the n
# callers' keys, through the admin API on one keep-alive connection; fails
# unless a check of the last caller then answers with the override's limit.
set_overrides() {
  python3 - "$1" "$2" <<'PY'
import http.client, json, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
auth = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
limit = {"algorithm": "fixed_window", "limit": 2000000, "window": "1s"}
for i in range(n):
    path = ["edge", "remote_address", f"10.0.{i // 256}.{i % 256}"]
    c.request("POST", "/admin/v1/overrides", json.dumps({"path": path, "limits": [limit]}), auth)
    r = c.getresponse(); body = r.read()
    if r.status != 200:
        sys.exit(f"override {path}: {r.status} {body!r}")
c.request("POST", "/v1/check", json.dumps({"path": path, "cost": 0}), {"Content-Type": "application/json"})
r = c.getresponse(); body = r.read()
if b"2000000" not in body:
    sys.exit(f"the override is not in force: {body!r}")
PY
}

services() { # scenario api
  [ -n "${BASELINE:-}" ] && echo "sluice @$BASELINE"
  case $1-$2 in
    deny-*) printf '%s\n' "sluice" "sluice (cache off)" "envoy (cache on)" "envoy (cache off)" ;;
    hot-grpc) printf '%s\n' "sluice" "sluice (lease_for 100ms)" "sluice (quota client)" "envoy" ;;
    hot-*) printf '%s\n' "sluice" "sluice (lease_for 100ms)" "envoy" ;;
    allow-*) printf '%s\n' "sluice" "sluice (leases)" "sluice (leases, lease_for 100ms)" "envoy" "floor" "sluice (memory)" "gubernator" ;;
    override-*) printf '%s\n' "sluice" "sluice (overrides)" "sluice (memory)" "sluice (memory, overrides)" ;;
    steady-*) printf '%s\n' "sluice" "sluice (leases)" "envoy" "floor" "sluice (memory)" "gubernator" ;;
    *) printf '%s\n' sluice envoy ;;
  esac
}

# The ceiling of the exact script on one key: the EVALSHA that one exact
# decision sends (seen through MONITOR), replayed by redis-benchmark.
script_ceiling() {
  redis-cli -p "$RPORT" flushall >/dev/null
  redis-cli -p "$RPORT" monitor >"$TMP/monitor.txt" &
  local mon=$!
  sleep 0.2
  "$TMP/hotkey" -redis "127.0.0.1:$RPORT" -lease 0 -once -key ceiling -limit 100000000000
  sleep 0.2
  kill "$mon"; wait "$mon" 2>/dev/null || true
  local cmd
  cmd=$(grep -m1 '"EVALSHA"' "$TMP/monitor.txt" | python3 -c 'import sys, shlex; l = sys.stdin.read(); print(shlex.join(shlex.split(l[l.index("]") + 1:])))')
  eval "redis-benchmark -p $RPORT -c 50 -P 16 -n 2000000 --csv $cmd" | tail -1 | python3 -c '
import sys, csv, json
row = next(csv.reader(sys.stdin))
print(json.dumps({"name": "hot|redis-benchmark: the exact script on one key|lib", "decisions_per_s": float(row[1])}))' >>"$TMP/hot.jsonl"
}

hot_library() {
  redis-cli -p "$RPORT" flushall >/dev/null
  "$TMP/hotkey" -redis "127.0.0.1:$RPORT" -d "$DURATION" -c 64 -limit 100000000000 -name "hot|library, leases, 64 goroutines|lib" >>"$TMP/hot.jsonl"
  "$TMP/hotkey" -redis "127.0.0.1:$RPORT" -d "$DURATION" -c 64 -lease 0 -limit 100000000000 -name "hot|library, exact, 64 goroutines|lib" >>"$TMP/hot.jsonl"
  redis-cli -p "$RPORT" flushall >/dev/null
  local a b
  "$TMP/hotkey" -redis "127.0.0.1:$RPORT" -d "$DURATION" -c 32 -limit 2000000 -window 1h -key capped -name "hot|library, leases, 2 processes into a limit of 2,000,000 (process 1)|lib" >"$TMP/a.json" &
  a=$!
  "$TMP/hotkey" -redis "127.0.0.1:$RPORT" -d "$DURATION" -c 32 -limit 2000000 -window 1h -key capped -name "hot|library, leases, 2 processes into a limit of 2,000,000 (process 2)|lib" >"$TMP/b.json" &
  b=$!
  wait "$a" "$b"
  cat "$TMP/a.json" "$TMP/b.json" >>"$TMP/hot.jsonl"
}

for round in $(seq "$ROUNDS"); do
  for scenario in $SCENARIOS; do
    configs "$scenario"
    for api in grpc http; do
      mapfile -t svcs < <(services "$scenario" "$api")
      for service in "${svcs[@]}"; do run "$scenario" "$service" "$api" </dev/null; done
    done
    if [ "$scenario" = hot ]; then
      script_ceiling </dev/null
      hot_library </dev/null
    fi
  done
done

touch "$TMP/hot.jsonl"
python3 - "$TMP/results.jsonl" "$ROUNDS" "$DURATION" "$TMP/hot.jsonl" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
by, order = {}, []
for r in rows:
    if r["name"] not in by:
        order.append(r["name"]); by[r["name"]] = []
    by[r["name"]].append(r)
print(f"{sys.argv[2]} rounds of {sys.argv[3]} per run, interleaved; medians over the rounds.")
scen = None
for n in order:
    s, svc, api = n.split("|")
    if s != scen:
        scen = s
        print(f"\n### {s}\n")
        if s == "steady":
            print("Offered: a fixed rate in all (STEADY_RATE); checks/s is what was answered.\n")
        print("| service | API | checks/s | vs Envoy | p50 | p99 | service CPU per check | × floor's | Redis CPU per check | denied |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rs = by[n]
    med = lambda k, rs=rs: st.median(r.get(k, 0) for r in rs)
    peer = next((m for m in order if m.startswith(f"{s}|envoy") and m.endswith("|" + api) and "cache off" not in m), None)
    ratio = f"{med('rps') / st.median(r['rps'] for r in by[peer]):.2f}x" if peer and not svc.startswith("envoy") else ""
    fl = by.get(f"{s}|floor|{api}")
    cpux = f"{med('cpu_us_per_req') / st.median(r['cpu_us_per_req'] for r in fl):.2f}x" if fl and svc != "floor" else ""
    tot = sum(sum(r["statuses"].values()) for r in rs)
    denied = sum(r["statuses"].get(k, 0) for r in rs for k in ("429", "OVER_LIMIT"))
    errs = sum(r.get("errors", 0) for r in rs)
    print(f"| {svc} | {api} | {med('rps'):,.0f} | {ratio} | {med('p50_us')/1000:.2f} ms | {med('p99_us')/1000:.2f} ms "
          f"| {med('cpu_us_per_req'):.1f} µs | {cpux} | {med('redis_cpu_us_per_req'):.1f} µs | {100*denied/max(tot,1):.1f}%"
          + (f" ({errs} errors)" if errs else "") + " |")
hot = [json.loads(l) for l in open(sys.argv[4])]
if hot:
    hby, horder = {}, []
    for r in hot:
        if r["name"] not in hby:
            horder.append(r["name"]); hby[r["name"]] = []
        hby[r["name"]].append(r)
    ceiling = st.median(r["decisions_per_s"] for r in hby[horder[0]])
    print("\n### hot: decisions per second against one Redis shard's script ceiling\n")
    print("| run | decisions/s | × script ceiling | script calls per 1000 decisions | admitted | limit | window count in Redis after |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in horder:
        rs = hby[n]
        med = lambda k, rs=rs: st.median(r.get(k, 0) for r in rs)
        calls = f"{1000*med('script_calls')/max(med('decisions'),1):.2f}" if "script_calls" in rs[0] else ""
        capped = "limit of" in n
        adm = f"{max(r['admitted'] for r in rs):,}" if capped else ""
        lim = f"{rs[0]['limit']:,}" if capped else ""
        wc = f"{max(r['window_count'] for r in rs):,}" if capped else ""
        print(f"| {n.split('|')[1]} | {med('decisions_per_s'):,.0f} | {med('decisions_per_s')/ceiling:.1f}x | {calls} | {adm} | {lim} | {wc} |")
    for n in horder:
        if "process 1" in n:
            other = n.replace("process 1", "process 2")
            # One line for every round: the most the two admitted together.
            pairs = list(zip(hby[n], hby[other]))
            tots = [a["admitted"] + b["admitted"] for a, b in pairs]
            lim = pairs[0][0]["limit"]
            wc = max(a["window_count"] for a, _ in pairs)
            over = sum(t > lim for t in tots)
            print(f"\nInto the limit, in {len(pairs)} rounds: the two processes admitted at most {max(tots):,} together (limit {lim:,}; the window counted at most {wc:,} after both closed)"
                  + (f" — OVER THE LIMIT in {over} rounds" if over else "."))
    print("\nService runs on the hot key are in the table above (checks/s); the quota client's answers \"OK (quota)\" are admitted from grants without a call.")
PY
