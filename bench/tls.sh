#!/bin/bash
# The cost of TLS 1.3 (PSK, TLS_AES_128_GCM_SHA256 on the system OpenSSL)
# against plain NVMe/TCP: one strata serve (RAM drive, --tls allowed) and
# the same `strata bench` jobs as one host NQN, plain and over TLS, runs
# alternating, the server pinned to one core and the load generator to the
# other.
#
#   bench/tls.sh                          # RUNTIME=5 REPEAT=3
#   RUNTIME=10 REPEAT=5 bench/tls.sh
#
# Prints, per workload, the median over REPEAT runs of IOPS, MB/s and
# p50/p99 latency, plain and TLS, and the TLS/plain ratio; raw JSON in
# bench/results/ (git-ignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
out=bench/results/tls-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
cargo build --release -q -p strata >&2
STRATA=$root/target/release/strata
NQN=nqn.2026-11.io.strata:default
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:7e5a0000-0000-4000-8000-000000000001
PORT=${PORT:-4490}
data=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$data"' EXIT

taskset -c "$SERVER_CPU" "$STRATA" serve --data-dir "$data/s" --drive mem:2G --default-volume-size 1G --tls allowed \
    --listen "127.0.0.1:$PORT" --discovery "127.0.0.1:$((PORT + 1))" --http "127.0.0.1:$((PORT + 2))" \
    >"$out/strata.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
    kill -0 "$SERVER" 2>/dev/null || { echo "strata exited; see $out/strata.log" >&2; exit 1; }
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
export STRATA_API=http://127.0.0.1:$((PORT + 2)) STRATA_TOKEN_FILE=$data/s/api-token
PSK=$("$STRATA" host add "$HOSTNQN" --tls-psk generate | grep -o 'NVMeTLSkey-1:[^ ]*' | head -n1)
[ -n "$PSK" ] || { echo "no PSK printed by strata host add" >&2; exit 1; }
target=tcp://127.0.0.1:$PORT/$NQN
# Write the namespace once so that reads hit allocated extents.
"$STRATA" bench --target "$target" --hostnqn "$HOSTNQN" --rw write --bs 128k --iodepth 8 --size 1G --json -q >/dev/null

WORKLOADS=(
    "randread-4k-qd1|--rw randread --bs 4k --iodepth 1"
    "randread-4k-qd32|--rw randread --bs 4k --iodepth 32"
    "randwrite-4k-qd32|--rw randwrite --bs 4k --iodepth 32"
    "read-128k-qd8|--rw read --bs 128k --iodepth 8"
    "write-128k-qd8|--rw write --bs 128k --iodepth 8"
)
echo "strata serve --tls allowed on CPU $SERVER_CPU, strata bench on CPU $CLIENT_CPU, ${RUNTIME}s x $REPEAT per workload; $(openssl version)" >&2
for w in "${WORKLOADS[@]}"; do
    name=${w%%|*}
    read -r -a args <<<"${w#*|}"
    for r in $(seq "$REPEAT"); do
        taskset -c "$CLIENT_CPU" "$STRATA" bench --target "$target" --hostnqn "$HOSTNQN" "${args[@]}" --jobs 1 \
            --runtime "${RUNTIME}s" --json -q >"$out/plain.$name.$r.json"
        taskset -c "$CLIENT_CPU" "$STRATA" bench --target "$target" --hostnqn "$HOSTNQN" --tls-psk "$PSK" "${args[@]}" \
            --jobs 1 --runtime "${RUNTIME}s" --json -q >"$out/tls.$name.$r.json"
    done
done
grep -q "TLS established\|TLS" "$out/strata.log" || true
python3 - "$out" "${WORKLOADS[@]}" <<'PY'
import json, statistics, sys, glob
out, workloads = sys.argv[1], [w.split("|")[0] for w in sys.argv[2:]]
def med(label, name, key):
    vals = []
    for f in sorted(glob.glob(f"{out}/{label}.{name}.*.json")):
        r = json.load(open(f))["workloads"][0]["result"]
        vals.append(r["latency"][key] if key.endswith("_us") else r[key])
    return statistics.median(vals) if vals else float("nan")
print(f"{'workload':<20} {'metric':<8} {'plain':>12} {'tls':>12} {'tls/plain':>10}")
for w in workloads:
    for key, fmt in [("iops", "{:.0f}"), ("mbps", "{:.1f}"), ("p50_us", "{:.1f}"), ("p99_us", "{:.1f}")]:
        a, b = med("plain", w, key), med("tls", w, key)
        print(f"{w:<20} {key:<8} {fmt.format(a):>12} {fmt.format(b):>12} {(b / a if a else float('nan')):>10.2f}")
print(f"(raw results: {out})")
PY
