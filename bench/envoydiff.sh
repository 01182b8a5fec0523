#!/usr/bin/env bash
# Sluice started as envoyproxy/ratelimit against envoyproxy/ratelimit
# itself, request by request: the long run of envoydiff's TestAgainstEnvoy
# (./test.sh runs a short one), more seeds and sequences, and the
# features that wait for minute boundaries. Prints every disagreement and
# the agreement per feature and field (the table at the end).
#
#   bench/envoydiff.sh                            seeds 1,2,3, 4 sequences a feature (~7 minutes)
#   SEEDS=7 SCALE=2 bench/envoydiff.sh            others
#   bench/envoydiff.sh -only 'quota|stream'       some features (any of the test's flags)
#   bench/envoydiff.sh -overlimit-cache           both local caches on (LOCAL_CACHE_SIZE_IN_BYTES;
#                                                 report only: the answers then depend on timing)
#   bench/envoydiff.sh -trace nested              every answer of a feature's sequences
#
# Exits 1 when the answers differ otherwise than envoydiff/diff_test.go's
# knownToDiffer says (with other seeds, other fields may differ).
# Needs Go and redis-server.
set -euo pipefail
cd "$(dirname "$0")/../envoydiff"
exec go test -count=1 -v -run '^TestAgainstEnvoy$' -timeout 2h . \
  -args -seeds "${SEEDS:-1,2,3}" -scale "${SCALE:-4}" -long "$@"
