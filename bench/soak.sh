#!/bin/bash
# The chaos suite's long run: strata serve under verified load, attacked
# with connection resets, kill -9, idle sockets, stalled readers, R2T
# hoarders, connect floods and volume operations (see docs/chaos.md).
#
#   bench/soak.sh                 # 30 minutes, seed derived from the time
#   bench/soak.sh 2h 12345        # DURATION SEED (replay a failing seed)
#   EXTRA="--no-tuning" bench/soak.sh 10m    # a strata without the tuning keys
#   EXTRA="--only resets,kill9 --rss-limit-mb 512" bench/soak.sh 10m 7
#
# Builds the release binaries once, runs `strata-chaos run` with its work
# dir and JSON report under target/soak/, and prints the summary: rounds,
# kill -9 count, resets, bytes verified, lost blocks, peak RSS. Exit status
# is strata-chaos's: 0 clean, 1 failures found, 2 usage error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${1:-30m}
SEED=${2:-$(( $(date +%s) ^ ($$ << 16) ))}
EXTRA=${EXTRA:-}
echo "soak: duration $DURATION, seed $SEED (replay: bench/soak.sh $DURATION $SEED)"

cargo build --release -p strata -p strata-chaos >&2

out=target/soak/$(date +%Y%m%d-%H%M%S)-$SEED
mkdir -p "$out"
report=$out/report.json
set +e
# shellcheck disable=SC2086 # EXTRA is a list of options
target/release/strata-chaos run --strata target/release/strata --duration "$DURATION" --seed "$SEED" \
    --work-dir "$out/work" --report "$report" $EXTRA 2>&1 | tee "$out/output.txt"
status=${PIPESTATUS[0]}
set -e

echo
echo "soak summary (seed $SEED, exit $status):"
# The first line of each label (its first 24 columns): the scenario table
# further down reuses some of the names.
awk '/^strata-chaos (CLEAN|FAILED)/ || /^  (kill -9|resets|bytes verified|blocks lost|wrong reads|hangs|peak RSS) / {
        key = substr($0, 1, 24); if (!(key in seen)) { seen[key] = 1; print; found = 1 }
    } END { if (!found) print "  (no summary: the run could not be carried out, see above)" }' "$out/output.txt"
echo "report: $report"
echo "strata log: $out/work/strata.log"
exit "$status"
