#!/usr/bin/env bash
# The whole test suite: installs what the tests start (Debian's
# redis-server and redis-tools, chromium, which opens the simulator's
# report, nginx and caddy, which the forward-auth tests put in front of
# Sluice, prometheus, which scrapes it, and podman, which builds the
# image, with runc, which runs it) when it is missing, then vets and runs
# every test with the race detector, the chart's test, the comparison
# with envoyproxy/ratelimit and a short run of each fuzz target. Every
# stage runs even when an earlier one fails; the failures are listed at
# the end and the exit status is 1 if there was any.
set -euo pipefail
cd "$(dirname "$0")"
need=()
command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || need+=(redis-server redis-tools)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# helm, which renders the chart (charts/), built from its module at a
# pinned version, in the background while the tests run.
helm_version=v3.22.0
helm_bin="$(go env GOPATH)/bin/helm"
helm_pid=""
# (The module's version, which go install records: the binary's own
# "version --short" says v3.22 without ldflags, and never matched.)
if ! go version -m "$helm_bin" 2>/dev/null | grep -Eq "^\s+mod\s+helm\.sh/helm/v3\s+$helm_version\s"; then
  echo "test.sh: installing helm $helm_version (go install)" >&2
  go install "helm.sh/helm/v3/cmd/helm@$helm_version" > /tmp/sluice-helm-install.log 2>&1 &
  helm_pid=$!
fi
failed=()
fail() { failed+=("$1"); echo "test.sh: FAILED: $1" >&2; }
# grpcurl, which TestGRPCReflection runs against sluice serve, built from
# its module at the pinned version (the test builds it again: then it only
# links), in the background while go vet runs.
grpcurl_version=v1.9.3
GOBIN="$(mktemp -d)" GOFLAGS= go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$grpcurl_version" > /tmp/sluice-grpcurl-install.log 2>&1 &
grpcurl_pid=$!
go vet ./... || fail "go vet ./..."
wait "$grpcurl_pid" || { cat /tmp/sluice-grpcurl-install.log >&2; fail "installing grpcurl $grpcurl_version"; }
# The fuzz targets' test binaries (instrumented for the fuzzer: one build
# a package, where `go test -fuzz` built one a target), built in the
# background while the tests run; the fuzz stage below runs them.
fuzz_targets=(".:FuzzKeyInjective" "./policy:FuzzParse" "./server:FuzzParseCheck" "./server:FuzzShouldRateLimit"
  "./cmd/sluice:FuzzParseEvent" "./internal/jsonenc:FuzzAppendString" "./internal/sf:FuzzString")
fuzz_bin="$(mktemp -d)"
(
  for pkg in $(printf '%s\n' "${fuzz_targets[@]%%:*}" | sort -u); do
    go test -c -fuzz . -o "$fuzz_bin/$(go list -f '{{.ImportPath}}' "$pkg" | tr / _).test" "$pkg" || echo "test.sh: building $pkg for fuzzing failed" >&2
  done
) > /tmp/sluice-fuzz-build.log 2>&1 &
fuzz_build_pid=$!
# -timeout: go test's default of 10 minutes a package is a deadline a busy
# machine outlasts (cmd/sluice took 8 under load); the tests bound their
# own waits, as hang detectors.
go test -race -count=1 -timeout 30m ./... "$@" || fail "go test -race ./..."
# The chart's test is a module of its own (charts/go.mod): the Kubernetes
# API types stay out of Sluice's.
if [ -n "$helm_pid" ] && ! wait "$helm_pid"; then
  cat /tmp/sluice-helm-install.log >&2; fail "installing helm $helm_version"
fi
(cd charts && go vet ./...) || fail "charts: go vet ./..."
(cd charts && PATH="$(go env GOPATH)/bin:$PATH" go test -count=1 ./...) || fail "charts: go test ./..."
# Sluice started as envoyproxy/ratelimit against envoyproxy/ratelimit
# itself, request by request (envoydiff/, a module of its own: the
# service's dependencies stay out of Sluice's); a short seeded run, the
# long one is bench/envoydiff.sh.
(cd envoydiff && go vet ./...) || fail "envoydiff: go vet ./..."
(cd envoydiff && go test -count=1 -timeout 30m ./...) || fail "envoydiff: go test ./..."
# A short run of every fuzz target (their seeds ran above as tests): 10,000
# inputs each (a second or a few), so that CI explores a little beyond the
# seeds every time. A count, not a duration: a duration races Go's fuzz
# coordinator at its end and can fail with a bare "context deadline
# exceeded" on a busy machine (golang/go#75804, fixed in Go 1.27).
# Each runs as `go test -fuzz` runs it: in its package's directory, with
# the corpus go test keeps under GOCACHE.
fuzz_time=${FUZZ_TIME:-10000x}
fuzz_failed=0
wait "$fuzz_build_pid" || true
fuzz_cache="$(go env GOCACHE)/fuzz"
for target in "${fuzz_targets[@]}"; do
  pkg=$(go list -f '{{.ImportPath}}' "${target%%:*}")
  bin="$fuzz_bin/$(echo "$pkg" | tr / _).test"
  if ! out=$(cd "${target%%:*}" && "$bin" -test.paniconexit0 -test.timeout=10m -test.run '^$' -test.fuzz "^${target#*:}\$" \
    -test.fuzztime "$fuzz_time" -test.fuzzcachedir "$fuzz_cache/$pkg" 2>&1); then
    echo "$out"; [ -x "$bin" ] || cat /tmp/sluice-fuzz-build.log >&2
    fail "fuzz $target"; fuzz_failed=$((fuzz_failed + 1))
  fi
done
rm -rf "$fuzz_bin"
echo "fuzz: ${#fuzz_targets[@]} targets, $fuzz_time each: $fuzz_failed failed"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: ${#failed[@]} stage(s) failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test.sh: every stage passed"
