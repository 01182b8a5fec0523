#!/usr/bin/env bash
# One limit across three regions (issue 57), side by side in one run, over
# the same relays (each holding every byte DELAY each way) and the same load:
#   Sluice global     a home Redis and one Redis per region; INSTANCES
#                     `sluice serve`s per region on their region's Redis,
#                     redis.home through the region's relay to home: the
#                     node `global` (global: true, LIMIT a minute)
#   Sluice regional   the same services, the node `regional` (LIMIT/3 a
#                     minute in each region, no home): the baseline
#   envoyproxy/ratelimit  one central Redis; one instance per region,
#                     reaching it through the region's relay (exact, and
#                     every check crosses the link)
#   gubernator GLOBAL three instances as three regions, each reached by its
#                     peers through a relay in front of its gRPC port
# Each region's checks go to its own instances directly (no relay), RATE a
# second per region and system, one check at a time on a schedule (open
# loop), for WINDOWS one-minute windows after at least WARM of warm-up:
# about WINDOWS + 1.5 minutes. bench/cmd/global runs the relays and the
# load and prints: admitted per window against the limit, and each
# region's p50 and p99 of a check (HTTP, loopback).
# Needs Go and redis-server.
set -euo pipefail
cd "$(dirname "$0")"
DELAY=${DELAY:-40ms}
RATE=${RATE:-100}
LIMIT=${LIMIT:-9000}
WINDOWS=${WINDOWS:-2}
WARM=${WARM:-15s}
INSTANCES=${INSTANCES:-2}

. ./lib.sh # TMP, PIDS, cleanup on exit, freeport, waitport

(cd .. && go build -o "$TMP/sluice" ./cmd/sluice)
go build -o "$TMP/global" ./cmd/global
(cd cmd/envoyrl && go build -o "$TMP/envoyrl" .)
(cd cmd/gubernator && go build -o "$TMP/gubernator" .)

redis() { # port
  redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no --daemonize no --loglevel warning >>"$TMP/redis.log" 2>&1 &
  PIDS+=($!); waitport "$1"
}
HOME_PORT=$(freeport); CENTRAL=$(freeport)
redis "$HOME_PORT"; redis "$CENTRAL"

cat >"$TMP/limits.yaml" <<YAML
schema:
  global:
    global: true
    limits: {algorithm: fixed_window, limit: $LIMIT, window: 1m}
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 1000000, window: 1h}
  regional:
    limits: {algorithm: fixed_window, limit: $((LIMIT / 3)), window: 1m}
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 1000000, window: 1h}
YAML
mkdir -p "$TMP/rt/ratelimit/config"
cat >"$TMP/rt/ratelimit/config/edge.yaml" <<YAML
domain: edge
descriptors:
  - key: api
    value: global
    rate_limit: {unit: minute, requests_per_unit: $LIMIT}
YAML

# Ports first, so that the driver's relays are up before the services that
# use them start.
declare -A RP GP EH GH RR SH
RELAYS=() PEERS=() TARGETS=()
for r in a b c; do
  RP[s$r]=$(freeport); RELAYS+=(-relay "127.0.0.1:${RP[s$r]}=127.0.0.1:$HOME_PORT")
  RP[e$r]=$(freeport); RELAYS+=(-relay "127.0.0.1:${RP[e$r]}=127.0.0.1:$CENTRAL")
  GP[$r]=$(freeport); RP[g$r]=$(freeport); RELAYS+=(-relay "127.0.0.1:${RP[g$r]}=127.0.0.1:${GP[$r]}")
  PEERS+=("127.0.0.1:${RP[g$r]}")
  RR[$r]=$(freeport); redis "${RR[$r]}"
  urls=()
  for i in $(seq "$INSTANCES"); do SH[$r$i]=$(freeport); urls+=("http://127.0.0.1:${SH[$r$i]}"); done
  u=$(IFS=,; echo "${urls[*]}")
  EH[$r]=$(freeport); GH[$r]=$(freeport)
  TARGETS+=(-target "Sluice global|$r|sluice-global|$u" -target "Sluice regional|$r|sluice-regional|$u"
    -target "envoyproxy/ratelimit|$r|envoy|http://127.0.0.1:${EH[$r]}" -target "gubernator GLOBAL|$r|gubernator|http://127.0.0.1:${GH[$r]}")
done
"$TMP/global" -delay "$DELAY" -limit "$LIMIT" -rate "$RATE" -windows "$WINDOWS" -warm "$WARM" "${RELAYS[@]}" "${TARGETS[@]}" \
  >"$TMP/out.md" 2> >(tee "$TMP/global.log" >&2) &
DRIVER=$!; PIDS+=("$DRIVER")
waitport "${RP[gc]}"
peers=$(IFS=,; echo "${PEERS[*]}")
for r in a b c; do
  for i in $(seq "$INSTANCES"); do
    SLUICE_REDIS_HOME="redis://127.0.0.1:${RP[s$r]}/0" "$TMP/sluice" serve --http "127.0.0.1:${SH[$r$i]}" --grpc "127.0.0.1:$(freeport)" \
      --policy "$TMP/limits.yaml" --store "redis://127.0.0.1:${RR[$r]}/0" --log-level warn >>"$TMP/sluice.log" 2>&1 &
    PIDS+=($!)
  done
  env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:${RP[e$r]}" \
    REDIS_PIPELINE_WINDOW=150us REDIS_POOL_SIZE=10 LOCAL_CACHE_SIZE_IN_BYTES=0 \
    RUNTIME_ROOT="$TMP/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT="${EH[$r]}" GRPC_HOST=127.0.0.1 GRPC_PORT="$(freeport)" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(freeport)" \
    "$TMP/envoyrl" >>"$TMP/envoy.log" 2>&1 &
  PIDS+=($!)
  env GUBER_PEER_DISCOVERY_TYPE=none GUBER_LOG_LEVEL=warn GUBER_GRPC_ADDRESS="127.0.0.1:${GP[$r]}" GUBER_HTTP_ADDRESS="127.0.0.1:${GH[$r]}" \
    GUBER_ADVERTISE_ADDRESS="127.0.0.1:${RP[g$r]}" PEERS="$peers" "$TMP/gubernator" >>"$TMP/gubernator.log" 2>&1 &
  PIDS+=($!)
done
if ! wait "$DRIVER"; then
  tail -5 "$TMP/sluice.log" "$TMP/envoy.log" "$TMP/gubernator.log" >&2
  exit 1
fi
cat "$TMP/out.md"
