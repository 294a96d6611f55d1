#!/bin/bash
# What a failover costs a host: three `strata node` processes on
# loopback with a private etcd (lease TTL 3 s), a rep:3 volume, and
# strata's own multipath initiator writing it at queue depth 1 with
# verified reads, through ROUNDS kill -9s of the owner (and its return)
# and ROUNDS path losses (the host port of the node the host uses closed
# by iptables while the node lives). Prints each event's pause (the
# longest gap between two completions) as p50/p99/max, and the errors
# the host saw (must be 0). crates/strata/tests/cluster/failover.rs.
#
#   sudo bench/failover.sh            # 20 rounds, release build
#   sudo bench/failover.sh 5          # ROUNDS
#   PROFILE=dev sudo -E bench/failover.sh 2
#
# Goals (issue #23): path loss at most 50 ms; owner crash at most the
# lease TTL plus 1 s; zero I/O errors. Needs root, iptables and etcd
# (Debian etcd-server). The report is kept under target/failover/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ROUNDS=${1:-20}
PROFILE=${PROFILE:-release}
[[ "$ROUNDS" =~ ^[0-9]+$ ]] || { echo "failover: ROUNDS $ROUNDS is not a number" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "failover: needs root for iptables (sudo -E)" >&2; exit 2; }
command -v iptables >/dev/null || { echo "failover: needs iptables" >&2; exit 2; }

out=$root/target/failover/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
STRATA_FAILOVER_ROUNDS=$ROUNDS STRATA_FAILOVER_REPORT=$out/report.json STRATA_TEST_LOGS=$out/logs \
    cargo test --profile "$PROFILE" -p strata --test cluster -- failover:: --nocapture 2>&1 | tee "$out/output.txt"
echo
echo "failover report ($ROUNDS rounds, $PROFILE build):"
cat "$out/report.json"
