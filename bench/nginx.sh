#!/usr/bin/env bash
# The price of a shared limit behind nginx: requests per second through
# Debian's nginx to an upstream (loadgen bare-http), in interleaved rounds:
#   sluice     Sluice's forward-auth, docs/proxies/nginx.conf as the README
#              shows it, Sluice on a Redis store (a limit shared by every
#              nginx)
#   sluice-lease the same on Redis with lease: true on the limit's node:
#              checks spend leased quota, no round trip each
#   sluice-mem the same with Sluice on its memory store (one Sluice's limit)
#   auth-floor the same nginx.conf with, in Sluice's place, a net/http
#              server that answers 200 at once (loadgen bare-http -empty):
#              what nginx's auth_request costs with a free check, the most
#              any forward-auth service can keep
#   limit_req  nginx's own limit_req, by the same key (one nginx's limit)
#   none       no limit at all
# Every request is GET /page with an X-Api-Key of 1000 callers, each far
# from its limit (a fixed window of 1,000,000 a second), 50 keep-alive
# connections; one nginx worker in each case.
#
#   bench/nginx.sh                    3 rounds of 5 s
#   ROUNDS=1 DURATION=2s bench/nginx.sh
#
# Needs Go, nginx, redis-server and python3.
set -euo pipefail
cd "$(dirname "$0")"
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-50}

. ./lib.sh # TMP, PIDS, cleanup on exit, freeport, waitport

(cd .. && go build -o "$TMP/sluice" ./cmd/sluice)
(cd cmd/loadgen && go build -o "$TMP/loadgen" .)

declare -A spid # the forward-auth servers, for their CPU per request
rport=$(freeport)
redis-server --bind 127.0.0.1 --port "$rport" --save "" --appendonly no --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
up=$(freeport)
"$TMP/loadgen" bare-http -addr "127.0.0.1:$up" >"$TMP/upstream.log" 2>&1 &
PIDS+=($!)
fa=$(freeport)
"$TMP/loadgen" bare-http -empty -addr "127.0.0.1:$fa" >"$TMP/auth-floor.log" 2>&1 &
PIDS+=($!)
spid[auth-floor]=$!
waitport "$rport"
waitport "$up"
waitport "$fa"

sport=$(freeport)
cat >"$TMP/limits.yaml" <<YAML
schema:
  web:
    children:
      key:
        children:
          "*":
            limits: {algorithm: fixed_window, limit: 1000000, window: 1s}
YAML
cat >"$TMP/sluice.yaml" <<YAML
http: 127.0.0.1:$sport
grpc: "off"
store: redis://127.0.0.1:$rport/0
policy: $TMP/limits.yaml
log_level: warn
forward_auth:
  trusted_proxies: [127.0.0.1/32]
  routes:
    - match: /
      path: [web, key, "{header:X-Api-Key}"]
YAML
"$TMP/sluice" serve --config "$TMP/sluice.yaml" >"$TMP/sluice.log" 2>&1 &
PIDS+=($!)
spid[sluice]=$!
mport=$(freeport)
sed -e "s/^http: .*/http: 127.0.0.1:$mport/" -e "s/^store: .*/store: memory/" "$TMP/sluice.yaml" >"$TMP/sluice-mem.yaml"
"$TMP/sluice" serve --config "$TMP/sluice-mem.yaml" >"$TMP/sluice-mem.log" 2>&1 &
PIDS+=($!)
spid[sluice-mem]=$!
lport=$(freeport)
sed -e 's/^\( *\)limits:/\1lease: true\n\1limits:/' "$TMP/limits.yaml" >"$TMP/limits-lease.yaml"
sed -e "s/^http: .*/http: 127.0.0.1:$lport/" -e "s|^policy: .*|policy: $TMP/limits-lease.yaml|" "$TMP/sluice.yaml" >"$TMP/sluice-lease.yaml"
"$TMP/sluice" serve --config "$TMP/sluice-lease.yaml" >"$TMP/sluice-lease.log" 2>&1 &
PIDS+=($!)
spid[sluice-lease]=$!
waitport "$sport"
waitport "$mport"
waitport "$lport"

# nginx VARIANT PORT SITE: one nginx (master and one worker) serving SITE.
nginx_start() {
  local dir=$TMP/nginx-$1
  mkdir -p "$dir"
  printf '%s\n' "$3" >"$dir/site.conf"
  cat >"$dir/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    include $dir/site.conf;
}
CONF
  nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
  PIDS+=($!)
  waitport "$2"
}

declare -A port
port[sluice]=$(freeport)
nginx_start sluice "${port[sluice]}" "$(sed -e "s/127.0.0.1:8000/127.0.0.1:${port[sluice]}/" \
  -e "s/127.0.0.1:8080/127.0.0.1:$sport/" -e "s/127.0.0.1:9000/127.0.0.1:$up/" ../docs/proxies/nginx.conf)"
port[sluice-lease]=$(freeport)
nginx_start sluice-lease "${port[sluice-lease]}" "$(sed -e "s/127.0.0.1:8000/127.0.0.1:${port[sluice-lease]}/" \
  -e "s/127.0.0.1:8080/127.0.0.1:$lport/" -e "s/127.0.0.1:9000/127.0.0.1:$up/" ../docs/proxies/nginx.conf)"
port[sluice-mem]=$(freeport)
nginx_start sluice-mem "${port[sluice-mem]}" "$(sed -e "s/127.0.0.1:8000/127.0.0.1:${port[sluice-mem]}/" \
  -e "s/127.0.0.1:8080/127.0.0.1:$mport/" -e "s/127.0.0.1:9000/127.0.0.1:$up/" ../docs/proxies/nginx.conf)"
port[auth-floor]=$(freeport)
nginx_start auth-floor "${port[auth-floor]}" "$(sed -e "s/127.0.0.1:8000/127.0.0.1:${port[auth-floor]}/" \
  -e "s/127.0.0.1:8080/127.0.0.1:$fa/" -e "s/127.0.0.1:9000/127.0.0.1:$up/" ../docs/proxies/nginx.conf)"
port[limit_req]=$(freeport)
nginx_start limit_req "${port[limit_req]}" "
upstream app { server 127.0.0.1:$up; keepalive 32; }
limit_req_zone \$http_x_api_key zone=keys:10m rate=1000000r/s;
server {
    listen 127.0.0.1:${port[limit_req]};
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    location / {
        limit_req zone=keys burst=1000 nodelay;
        limit_req_status 429;
        proxy_pass http://app;
    }
}"
port[none]=$(freeport)
nginx_start none "${port[none]}" "
upstream app { server 127.0.0.1:$up; keepalive 32; }
server {
    listen 127.0.0.1:${port[none]};
    proxy_http_version 1.1;
    proxy_set_header Connection \"\";
    location / { proxy_pass http://app; }
}"

out=$TMP/results.jsonl
for r in $(seq "$ROUNDS"); do
  for v in sluice sluice-lease sluice-mem auth-floor limit_req none; do
    "$TMP/loadgen" http -method GET -path /page -header 'X-Api-Key: k{i}' -keys 1000 \
      -addr "127.0.0.1:${port[$v]}" -c "$CONC" -d "$DURATION" -name "$v" ${spid[$v]:+-pid ${spid[$v]}} >>"$out"
  done
done

echo "$ROUNDS rounds of $DURATION per run, interleaved; medians over the rounds."
echo
python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["name"], []).append(r)
none = statistics.median(r["rps"] for r in runs["none"])
print("| nginx with | requests/s | vs no limit | p50 | p99 | forward-auth CPU per request | answers |")
print("|---|--:|--:|--:|--:|--:|---|")
for name in ["sluice", "sluice-lease", "sluice-mem", "auth-floor", "limit_req", "none"]:
    rs = runs[name]
    rps = statistics.median(r["rps"] for r in rs)
    p50 = statistics.median(r["p50_us"] for r in rs) / 1000
    p99 = statistics.median(r["p99_us"] for r in rs) / 1000
    st = {}
    for r in rs:
        for k, v in r["statuses"].items():
            st[k] = st.get(k, 0) + v
    cpu = statistics.median(r.get("cpu_us_per_req", 0) for r in rs)
    cpu = f"{cpu:.1f} µs" if cpu else ""
    label = {"sluice": "Sluice forward-auth (Redis store)", "sluice-lease": "Sluice forward-auth (Redis store, lease: true)", "sluice-mem": "Sluice forward-auth (memory store)", "auth-floor": "forward-auth to a server that answers 200 at once", "limit_req": "nginx limit_req", "none": "no limit"}[name]
    print(f"| {label} | {rps:,.0f} | {rps/none:.2f}x | {p50:.2f} ms | {p99:.2f} ms | {cpu} | {', '.join(f'{k}: {v}' for k, v in sorted(st.items()))} |")
PY
