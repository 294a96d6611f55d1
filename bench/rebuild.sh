#!/bin/bash
# Rebuild throughput, and foreground I/O during a rebuild against without,
# in one run: a private etcd and NODES `strata node` processes (one rack
# each) on loopback serve one pool volume (PROTECT, default rep:3). It is
# written in full, a foreground workload runs (the baseline), a node that
# holds the volume and does not own it is killed with -9, and once the
# grace time has passed and the rebuild onto the other nodes has begun the
# same workload runs again; the rebuild is timed until the volume is
# healthy without the dead node, and the workload runs a third time.
#
#   bench/rebuild.sh                                 # rep:3, 1G, 50 MB/s
#   PROTECT=ec:2+1 MBPS=100 bench/rebuild.sh
#   STRATA_BIN=/tmp/strata-rel bench/rebuild.sh      # a prebuilt binary
#
# Environment:
#   STRATA_BIN  strata binary (default: target/release/strata; not built here)
#   ETCD        etcd binary (default: $STRATA_ETCD, else /usr/bin/etcd)
#   NODES       `strata node` processes (default 5)
#   PROTECT     the volume's protection (default rep:3)
#   SIZE        the volume's size, written in full first (default 1G)
#   MBPS        the rebuild bandwidth per node, `strata pool set
#               --rebuild-mbps` (default 50: a rebuild long enough to
#               measure under; 0 is no limit)
#   GRACE       `--rebuild-grace`, seconds (default 3)
#   RUNTIME     seconds per foreground run (default 4)
#   WORKLOAD    strata bench arguments of the foreground workload (default
#               "--rw randrw --rwmixread 70 --bs 4k --iodepth 8": writes
#               go to every copy, the joining node included)
#   OUT         JSON result (default bench/results/rebuild-YYYYMMDD-HHMMSS.json)
#
# Prints the rebuild's bytes, seconds and MB/s (bytes: what the dead node
# held of the volume), and the workload's IOPS and p99 before, during and
# after the rebuild with the during/before ratios.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
STRATA_BIN=${STRATA_BIN:-$root/target/release/strata}
ETCD=${ETCD:-${STRATA_ETCD:-/usr/bin/etcd}}
NODES=${NODES:-5}
PROTECT=${PROTECT:-rep:3}
SIZE=${SIZE:-1G}
MBPS=${MBPS:-50}
GRACE=${GRACE:-3}
RUNTIME=${RUNTIME:-4}
WORKLOAD=${WORKLOAD:---rw randrw --rwmixread 70 --bs 4k --iodepth 8}
OUT=${OUT:-$root/bench/results/rebuild-$(date +%Y%m%d-%H%M%S).json}
[ -x "$STRATA_BIN" ] || { echo "no strata binary at $STRATA_BIN: cargo build --release, or set STRATA_BIN" >&2; exit 2; }
[ -x "$ETCD" ] || { echo "no etcd at $ETCD: apt-get install etcd-server, or set ETCD" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rebuild.XXXXXX")
if [ -d /dev/shm ] && [ -w /dev/shm ]; then drives=$(mktemp -d /dev/shm/rebuild.XXXXXX); else drives=$tmp/drives; fi
mkdir -p "$drives"
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$drives"
    if [ "$rc" -ne 0 ]; then echo "logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() { echo "rebuild: $*" >&2; exit 1; }
wait_until() { # wait_until SECONDS WHAT COMMAND...
    local end=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$end" ] || die "timed out waiting for $what (logs in $tmp)"
        sleep 0.2
    done
}
read -r -a ports <<<"$(python3 -c '
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))' $((2 + 4 * NODES)))"
etcd_url=http://127.0.0.1:${ports[0]}
"$ETCD" --name rb --data-dir "$drives/etcd" --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:${ports[1]}" --initial-advertise-peer-urls "http://127.0.0.1:${ports[1]}" \
    --initial-cluster "rb=http://127.0.0.1:${ports[1]}" --initial-cluster-state new \
    --logger zap --log-level warn >"$tmp/etcd.log" 2>&1 &
PIDS+=($!)
wait_until 30 etcd curl -sf -m 2 "$etcd_url/health"
declare -A PID
for i in $(seq "$NODES"); do
    b=$((2 + (i - 1) * 4))
    "$STRATA_BIN" node --name "n$i" --etcd "$etcd_url" --label "rack=r$i" --http "127.0.0.1:${ports[$b]}" \
        --fabric "127.0.0.1:${ports[$((b + 1))]}" --listen "127.0.0.1:${ports[$((b + 2))]}" \
        --discovery "127.0.0.1:${ports[$((b + 3))]}" --data-dir "$tmp/n$i" \
        --drive "$drives/n$i.img:$(( $(numfmt --from=iec "$SIZE") / 1048576 + 1280 ))M" >"$tmp/n$i.log" 2>&1 &
    PID[n$i]=$!
    PIDS+=($!)
done
api=http://127.0.0.1:${ports[2]}
# The API needs a token: n1's admin token (every node takes it).
export STRATA_TOKEN_FILE=$tmp/n1/api-token
status() { "$STRATA_BIN" pool status --json --api "$api"; }
q() { # q PYTHON-EXPRESSION over the status `s` and the volume `v`
    status | python3 -c "import json,sys; s=json.load(sys.stdin); v=next((v for v in s['volumes'] if v['name']=='vol'), None); r=($1); print(r) if r is not None and r is not False else sys.exit(1)"
}
wait_until 60 "$NODES nodes up" q "sum(n['state']=='up' for n in s['nodes']) == $NODES or None"
"$STRATA_BIN" pool set --api "$api" --rebuild-grace "${GRACE}s" --rebuild-mbps "$MBPS" >/dev/null
"$STRATA_BIN" volume create vol --size "$SIZE" --protect "$PROTECT" --allow-any-host --api "$api" --json >"$tmp/create.json"
wait_until 60 "the volume healthy" q "v and v['state']=='healthy' and v['owner']"
target=tcp://$(q "next(n['listen'] for n in s['nodes'] if n['id']==v['owner'])")/nqn.2026-11.io.strata:vol
echo "$PROTECT volume of $SIZE on $NODES nodes, rebuild at $MBPS MB/s per node, grace ${GRACE}s; $target" >&2
wait_until 60 "the prefill" "$STRATA_BIN" bench --target "$target" --rw write --bs 128k --iodepth 8 --size "$SIZE" -q
# The node records catch up with what each node holds, and the owner
# cleans the dirty regions the prefill left (5 s after their last write).
sleep 7

run() { # run NAME: the foreground workload, its JSON result in $tmp/NAME.json
    # shellcheck disable=SC2086
    "$STRATA_BIN" bench --target "$target" $WORKLOAD --runtime "${RUNTIME}s" --ramp 1s --json -q >"$tmp/$1.json"
}
run before
victim=$(q "next(n['name'] for n in s['nodes'] if n['id'] in v['replicas'] and n['id'] != v['owner'])")
held=$(q "next(n['allocated_bytes'] for n in s['nodes'] if n['name']=='$victim')")
kill -KILL "${PID[$victim]}"
killed=$SECONDS
echo "killed $victim (it held $((held >> 20)) MiB)" >&2
wait_until 120 "the rebuild to begin" q "v['state'] in ('rebuilding',) or None"
t0=$(date +%s.%N)
run during
still=$(q "v['state']")
wait_until 900 "the rebuild to end" q "v['state']=='healthy' and v['map_epoch']==s['map_epoch'] or None"
t1=$(date +%s.%N)
run after
python3 - "$tmp" "$OUT" "$t0" "$t1" "$held" "$PROTECT" "$SIZE" "$MBPS" "$NODES" "$WORKLOAD" "$still" \
    "$((SECONDS - killed))" <<'EOF'
import json, sys, time
tmp, out, t0, t1, held, protect, size, mbps, nodes, workload, still, since_kill = sys.argv[1:]
res = {k: json.load(open(f"{tmp}/{k}.json"))["workloads"][0]["result"] for k in ("before", "during", "after")}
secs = float(t1) - float(t0)
row = {k: {"iops": r["iops"], "p99_us": r["latency"]["p99_us"], "p50_us": r["latency"]["p50_us"], "errors": r["errors"]}
       for k, r in res.items()}
report = {
    "protect": protect, "size": size, "nodes": int(nodes), "rebuild_mbps_limit": int(mbps), "workload": workload,
    "rebuilt_bytes": int(held), "rebuild_seconds": secs, "rebuild_mb_s": int(held) / 1e6 / secs if secs else None,
    "still_rebuilding_after_the_during_run": still == "rebuilding",
    "runs": row,
    "during_vs_before": {"iops": row["during"]["iops"] / row["before"]["iops"],
                         "p99": row["during"]["p99_us"] / row["before"]["p99_us"]},
    "date": time.strftime("%Y-%m-%d %H:%M:%S"), "load1": open("/proc/loadavg").read().split()[0],
}
json.dump(report, open(out, "w"), indent=1)
print(f"rebuild of {protect} ({int(held) >> 20} MiB on the dead node): {secs:.1f} s from its start, "
      f"{report['rebuild_mb_s']:.0f} MB/s (limit {mbps} MB/s per node)")
print(f"{'':8} {'IOPS':>10} {'p50 us':>8} {'p99 us':>8}")
for k in ("before", "during", "after"):
    print(f"{k:8} {row[k]['iops']:>10.0f} {row[k]['p50_us']:>8.0f} {row[k]['p99_us']:>8.0f}")
print(f"during/before: IOPS {report['during_vs_before']['iops']:.2f}, p99 {report['during_vs_before']['p99']:.2f}"
      + ("" if still == "rebuilding" else "  (the rebuild ended before the run did: lower MBPS or raise SIZE)"))
print(f"written to {out}")
EOF
