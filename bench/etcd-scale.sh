#!/bin/bash
# What a private etcd on this machine sustains of the control plane at
# several cluster sizes and lease TTLs: each simulated node renews its
# lease every third of the TTL and, every second, puts its record and
# reads every node's record, as a `strata node` reconcile pass does before
# it looks at any volume (crates/strata-meta/examples/etcd_scale.rs).
# docs/pool.md ("Choosing the lease TTL") argues the default from it.
#
#   bench/etcd-scale.sh                 # the default grid, 30 s a run
#   SECS=60 NODES="250 1000 2500" TTLS="3 10" RECORD=2048 bench/etcd-scale.sh
#
# Needs etcd (Debian etcd-server). The load generator shares the machine
# with etcd: compare runs made here, side by side.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
SECS=${SECS:-30}
NODES=${NODES:-"100 500 2500"}
TTLS=${TTLS:-"2 10"}
RECORD=${RECORD:-1024}
command -v etcd >/dev/null || { echo "etcd-scale: needs etcd (apt-get install etcd-server)" >&2; exit 2; }

cargo build --release -q -p strata-meta --example etcd_scale
bin=$root/target/release/examples/etcd_scale
dir=$(mktemp -d "${TMPDIR:-/tmp}/etcd-scale.XXXXXX")
port=$((20000 + RANDOM % 20000))
etcd --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
    --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
    >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill $etcd_pid 2>/dev/null; wait $etcd_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.2
done
echo "etcd $(etcd --version | head -1 | awk '{print $3}') on 127.0.0.1:$port; $(nproc) cores"
for ttl in $TTLS; do
    # Leases alone, then with the reconcile pass's reads.
    for n in $NODES; do
        echo
        "$bin" --etcd "http://127.0.0.1:$port" --nodes "$n" --ttl "$ttl" --secs "$SECS" --record-bytes "$RECORD" --no-pass
    done
done
for n in $NODES; do
    echo
    "$bin" --etcd "http://127.0.0.1:$port" --nodes "$n" --ttl 10 --secs "$SECS" --record-bytes "$RECORD"
done
