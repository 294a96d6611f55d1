#!/bin/bash
# The pool's figures in one run: bench/pool.sh (rep:1, rep:3 and ec:4+2
# volumes side by side against a single node: 4 KiB random IOPS, 128 KiB
# throughput, p99), then bench/rebuild.sh for a rep:3 and an ec:4+2 volume
# (rebuild throughput at a bandwidth limit, and a foreground workload's
# IOPS and p99 during the rebuild against before), and a summary of all.
#
#   bench/pool-report.sh                            # RUNTIME=5 REPEAT=1 MBPS=50
#   RUNTIME=10 REPEAT=3 bench/pool-report.sh
#
# Environment: RUNTIME, REPEAT (bench/pool.sh), MBPS (bench/rebuild.sh),
# STRATA_BIN and ETCD (both). The JSON results go to bench/results/ as
# each script writes them; the text of each part to OUTDIR (default
# bench/results/pool-report-YYYYMMDD-HHMMSS/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${OUTDIR:-$root/bench/results/pool-report-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUTDIR"
export RUNTIME=${RUNTIME:-5} REPEAT=${REPEAT:-1} MBPS=${MBPS:-50}

echo "== protections side by side (bench/pool.sh) ==" >&2
bash "$root/bench/pool.sh" 2>&1 | tee "$OUTDIR/pool.txt"
echo "== rebuild of rep:3 (bench/rebuild.sh) ==" >&2
PROTECT=rep:3 NODES=5 RUNTIME=4 bash "$root/bench/rebuild.sh" 2>&1 | tee "$OUTDIR/rebuild-rep3.txt"
echo "== rebuild of ec:4+2 (bench/rebuild.sh; 7 nodes: six racks and one to rebuild on) ==" >&2
PROTECT=ec:4+2 NODES=7 RUNTIME=4 bash "$root/bench/rebuild.sh" 2>&1 | tee "$OUTDIR/rebuild-ec42.txt"

{
    echo "== summary =="
    grep -E "^workload |^(randread|randwrite|read-128k|write-128k)[-a-z0-9]* +(IOPS|MiB/s|p99 us) " "$OUTDIR/pool.txt" || true
    for f in rebuild-rep3 rebuild-ec42; do
        grep -E "^rebuild of|^during/before" "$OUTDIR/$f.txt" || true
    done
} | tee "$OUTDIR/summary.txt"
