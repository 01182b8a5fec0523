#!/usr/bin/env bash
# Runs bench/peers ROUNDS times and prints each benchmark's median ns/op
# with the lowest and highest round:
#
#   bench/peers.sh [ROUNDS] [PATTERN]      (defaults: 7, Peers)
#
# Each round runs every benchmark the pattern selects once, each in a
# process of its own, in a new random order: on this VM a long run slows
# down now and then (a parallel round can take twice as long, its two
# cores not always both there), and a fixed order would hand those spells
# to whichever library comes last. The median keeps such rounds out.
set -euo pipefail
rounds=${1:-7} pattern=${2:-Peers}
cd "$(dirname "$0")"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/peers.test" ./peers
# The benchmarks' names, to run each alone with every level anchored:
# BenchmarkPeers/go-limiter/... -> ^BenchmarkPeers$/^go-limiter$/...
"$dir/peers.test" -test.run '^$' -test.bench "$pattern" -test.benchtime 1x | grep '^Benchmark' |
  awk '{ sub(/-[0-9]+$/, "", $1); print $1 }' >"$dir/names"
[ -s "$dir/names" ] || { echo "peers.sh: no benchmark matches $pattern" >&2; exit 1; }
for _ in $(seq "$rounds"); do
  shuf "$dir/names" | while read -r name; do
    "$dir/peers.test" -test.run '^$' -test.bench "^${name//\//\$/^}\$" -test.benchtime 300ms -test.benchmem | grep '^Benchmark' >>"$dir/out"
  done
done
awk '
  NR == FNR { order[++m] = $1; next } # the names, in the order Go runs them
  { k = $1; sub(/-[0-9]+$/, "", k); shown[k] = $1; n[k]++; v[k, n[k]] = $3; for (i = 4; i <= NF; i++) if ($(i+1) == "allocs/op") al[k] = $i }
  END {
    printf "| benchmark | median ns/op | lowest | highest | allocs/op |\n|---|--:|--:|--:|--:|\n"
    for (j = 1; j <= m; j++) {
      k = order[j]; c = n[k]
      for (i = 1; i <= c; i++) x[i] = v[k, i]
      for (i = 2; i <= c; i++) { t = x[i]; for (h = i - 1; h >= 1 && x[h] > t; h--) x[h+1] = x[h]; x[h+1] = t }
      med = (c % 2) ? x[(c+1)/2] : (x[c/2] + x[c/2+1]) / 2
      printf "| %s | %.1f | %.1f | %.1f | %s |\n", shown[k], med, x[1], x[c], al[k]
    }
  }' "$dir/names" "$dir/out"
