#!/usr/bin/env bash
# Compares two commits on the same Go benchmarks, interleaved, so that a
# machine that speeds up or slows down during the run shifts both sides
# alike. Builds each package's test binary at each commit (in temporary
# git worktrees), then runs them in turn, ROUNDS times, and prints the
# median ns/op and allocs/op of each benchmark at each commit.
#
#   bench/ab.sh OLD NEW PACKAGE BENCH [ROUNDS]
#   bench/ab.sh 3f3aa52 HEAD ./policy '^BenchmarkCheck$/memory' 5
#   bench/ab.sh 2920a76 . ./bench/peers 'Peers/sluice-allow/gcra' 9
#
# NEW may be "." for the working tree. Tests that need redis-server find it
# as usual. CPU=1,2 runs each benchmark at those GOMAXPROCS (-test.cpu).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,12p "$0"; exit 2; }
old=$1 new=$2 pkg=$3 bench=$4 rounds=${5:-5}
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; [ "$new" = . ] || git -C "$top" worktree remove --force "$tmp/new" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$top" worktree add -q --detach "$tmp/old" "$old"
newdir=$top
if [ "$new" != . ]; then
  git -C "$top" worktree add -q --detach "$tmp/new" "$new"
  newdir=$tmp/new
fi
# Built from the package's directory, so that a package of the bench
# module (./bench/peers) builds in its own module.
(cd "$tmp/old/$pkg" && go test -c -o "$tmp/old.test" .)
(cd "$newdir/$pkg" && go test -c -o "$tmp/new.test" .)
for r in $(seq "$rounds"); do
  for side in old new; do
    dir=$tmp/old; [ $side = new ] && dir=$newdir
    (cd "$dir/$pkg" && "$tmp/$side.test" -test.run '^$' -test.bench "$bench" -test.benchmem -test.benchtime 300ms ${CPU:+-test.cpu "$CPU"}) |
      awk -v side=$side '/^Benchmark/ { for (i = 3; i <= NF; i++) { if ($(i+1) == "ns/op") ns = $i; if ($(i+1) == "allocs/op") al = $i } print side, $1, ns, al }' >> "$tmp/all"
  done
done
echo "| benchmark | $old ns/op | $new ns/op | new/old | $old allocs | $new allocs |"
echo "|---|--:|--:|--:|--:|--:|"
awk '
  { k = $2; n[$1 SUBSEP k]++; v[$1 SUBSEP k SUBSEP n[$1 SUBSEP k]] = $3; a[$1 SUBSEP k] = $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  function median(side, k,   c, i, j, t, x) {
    c = n[side SUBSEP k]
    for (i = 1; i <= c; i++) x[i] = v[side SUBSEP k SUBSEP i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
    return x[int((c + 1) / 2)]
  }
  END {
    for (i = 1; i <= m; i++) {
      k = order[i]; o = median("old", k); w = median("new", k)
      printf "| %s | %s | %s | %.2f | %s | %s |\n", k, o, w, (o > 0 ? w / o : 0), a["old" SUBSEP k], a["new" SUBSEP k]
    }
  }' "$tmp/all"
