#!/bin/bash
# Side-by-side benchmark: strata vs the Linux kernel's nvmet-tcp, in the same
# VM (../shared/vm), with the same fio jobs through the kernel initiator,
# both on RAM-backed storage. Prints 4 KiB random read IOPS (QD 32),
# 128 KiB sequential read throughput (QD 8), QD 1 latency p50/p99, and the
# strata/kernel ratios. The VM runs under TCG software emulation on the
# development machines, so only the ratios are meaningful.
#   bench/kernel-vs-strata.sh            (RUNTIME=10 seconds per job)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release -p strata
STRATA_BIN=$root/target/release/strata VM_TIMEOUT=1200 \
    tests/vm/run.sh bench/vm/kernel-vs-strata.sh --env RUNTIME="${RUNTIME:-10}"
