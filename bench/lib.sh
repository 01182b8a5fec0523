# Helpers the bench scripts source: a temporary directory TMP, removed on
# exit after the processes in PIDS are killed, and port helpers.

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# freeport prints a free TCP port on 127.0.0.1.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# waitport waits (at most 5s) until something listens on 127.0.0.1:$1.
waitport() { for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
