#!/usr/bin/env bash
# Runs bench/peers ROUNDS times (each round every library in turn, so a
# machine that speeds up or slows down shifts them alike) and prints each
# benchmark's median ns/op with the lowest and highest round:
#
#   bench/peers.sh [ROUNDS] [PATTERN]      (defaults: 7, Peers)
#
# On a VM whose two cores are sometimes not both there, a parallel round
# can take twice as long as the others; the median keeps such rounds out.
set -euo pipefail
rounds=${1:-7} pattern=${2:-Peers}
cd "$(dirname "$0")"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  go test -run '^$' -bench "$pattern" -benchtime 300ms -benchmem -count 1 ./peers | grep '^Benchmark' >> "$out"
done
awk '
  { k = $1; n[k]++; v[k, n[k]] = $3; for (i = 4; i <= NF; i++) if ($(i+1) == "allocs/op") al[k] = $i; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END {
    printf "| benchmark | median ns/op | lowest | highest | allocs/op |\n|---|--:|--:|--:|--:|\n"
    for (j = 1; j <= m; j++) {
      k = order[j]; c = n[k]
      for (i = 1; i <= c; i++) x[i] = v[k, i]
      for (i = 2; i <= c; i++) { t = x[i]; for (h = i - 1; h >= 1 && x[h] > t; h--) x[h+1] = x[h]; x[h+1] = t }
      med = (c % 2) ? x[(c+1)/2] : (x[c/2] + x[c/2+1]) / 2
      printf "| %s | %.1f | %.1f | %.1f | %s |\n", k, med, x[1], x[c], al[k]
    }
  }' "$out"
