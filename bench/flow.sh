#!/usr/bin/env bash
# Lists the Go files one POST /v1/check on Redis runs, from the handler to
# the script and back: server's TestFlowOfACheck runs under coverage of
# every package of the module twice, with one check and with 101 (the first
# loads the script); the blocks that run at least 100 times more in the
# second are a check's (the store's background work, such as its poll of
# resets every 250 ms, runs a few times more at most).
# docs/architecture.md ("How a decision flows") quotes the list.
#
#   bench/flow.sh     each file with the functions it runs, then the count
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mod=$(go list -m)
go test -c -o "$tmp/server.test" -covermode=atomic -coverpkg=./... ./server
for n in 1 101; do
  mkdir "$tmp/$n"
  (cd server && SLUICE_FLOW=$n "$tmp/server.test" -test.count=1 -test.run '^TestFlowOfACheck$' -test.gocoverdir="$tmp/$n" >/dev/null)
  go tool covdata textfmt -i "$tmp/$n" -o "$tmp/$n.txt"
done
# A block is "file:line.col,line.col statements count": keep the first line
# of those the 100 checks ran, then name the function that holds each.
awk 'FNR == 1 { next } FILENAME ~ /\/1\.txt$/ { one[$1] = $3; next } $3 >= one[$1] + 100 { split($1, a, ":"); split(a[2], b, "."); print a[1], b[1] }' \
  "$tmp/1.txt" "$tmp/101.txt" | sort -u > "$tmp/blocks"
go tool cover -func "$tmp/101.txt" | awk '$1 != "total:" { split($1, a, ":"); print a[1], a[2], $2 }' > "$tmp/funcs"
# A block before a file's first function is in a function literal of a
# package variable (a binding's closures): "(closures)".
awk 'FILENAME ~ /funcs$/ { n++; F[n] = $1; S[n] = $2; N[n] = $3; next }
  { best = 0; for (i = 1; i <= n; i++) if (F[i] == $1 && S[i] <= $2 && (best == 0 || S[i] > S[best])) best = i
    print $1, (best ? N[best] : "(closures)") }' "$tmp/funcs" "$tmp/blocks" | sort -u > "$tmp/used"
awk -v mod="$mod/" '{ sub(mod, "", $1); fns[$1] = fns[$1] " " $2 } END { for (f in fns) print f ":" fns[f] }' "$tmp/used" | sort
echo "$(awk '{ print $1 }' "$tmp/used" | sort -u | wc -l) Go files, $(wc -l < "$tmp/used") functions"
