#!/bin/bash
# The pool's long run: seven `strata node` processes in network
# namespaces with a private etcd, an ec:4+2 and a rep:3 volume under the
# chaos suite's verified hosts, and at random, round after round: kill -9
# of a holder, of an owner, of M+1 ec holders; a cut link; etcd killed or
# frozen; a drain cancelled half way. At the end every block is read back
# against the oracle and `strata volume check` compares every copy and
# shard (crates/strata/tests/cluster/pool_soak.rs; docs/pool.md).
#
#   sudo bench/pool-soak.sh                # 30 minutes, seed from the time
#   sudo bench/pool-soak.sh 2h 12345       # DURATION SEED (replay a seed)
#   PROFILE=release sudo -E bench/pool-soak.sh 30m 7
#   STRATA_SOAK_FAULTS=KillMPlusOne sudo -E bench/pool-soak.sh 10m 7   # one fault kind only
#
# DURATION is seconds or 90s / 30m / 2h. Needs root (network namespaces),
# iproute2 and etcd (Debian etcd-server). The report (rounds, faults,
# bytes written and verified, blocks lost, wrong reads, hangs, the
# checks) is printed and kept under target/pool-soak/, with every node's
# log when the run fails. Exit status 0:
# nothing lost or unreadable; 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${1:-30m}
SEED=${2:-$(( $(date +%s) ^ ($$ << 16) ))}
PROFILE=${PROFILE:-dev}

case "$DURATION" in
    *h) secs=$(( ${DURATION%h} * 3600 )) ;;
    *m) secs=$(( ${DURATION%m} * 60 )) ;;
    *s) secs=${DURATION%s} ;;
    *) secs=$DURATION ;;
esac
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "pool-soak: DURATION $DURATION is not 90s, 30m, 2h or seconds" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "pool-soak: needs root for network namespaces (sudo -E)" >&2; exit 2; }

# Absolute: cargo runs the test in its crate directory.
out=$root/target/pool-soak/$(date +%Y%m%d-%H%M%S)-$SEED
mkdir -p "$out"
echo "pool soak: $secs s, seed $SEED (replay: bench/pool-soak.sh $DURATION $SEED); output in $out"
set +e
STRATA_SOAK_SECS=$secs STRATA_SOAK_SEED=$SEED STRATA_SOAK_REPORT=$out/report.json STRATA_TEST_LOGS=$out/logs \
    cargo test --profile "$PROFILE" -p strata --test cluster -- pool_soak:: --nocapture 2>&1 | tee "$out/output.txt"
status=${PIPESTATUS[0]}
set -e

echo
echo "pool soak summary (seed $SEED, exit $status):"
if [ -f "$out/report.json" ]; then
    cat "$out/report.json"
else
    echo "(no report: the run stopped before the end; see $out/output.txt)"
fi
[ "$status" = 0 ] || exit 1
