#!/bin/bash
# The KV store's tiers against the raw device: `strata bench kv-tier`
# (put and get through the store's API: DRAM tier, SSD tier, pool tier)
# and, on the same file, fio (sequential 4 MiB writes at depth 4, as the
# SSD log writes; random reads of one value at the same depth as the
# store's), and on the same pool volume `strata bench` (sequential 1 MiB
# writes at depth 16, the log's four 4 MiB buffers in flight cut to the
# target's 1 MiB transfers; random reads of one value), side by side,
# REPEAT times, alternating.
#
#   bench/kv-tiers.sh                          1 MiB values, 512 MiB, depth 8
#   VALUE=256K TOTAL=1G QD=16 bench/kv-tiers.sh
#   DIR=/mnt/nvme bench/kv-tiers.sh            the file on another drive
#   POOL=tcp://10.0.0.5:4420/NQN bench/kv-tiers.sh   a pool volume elsewhere
#                                              (its contents are lost)
#   POOL=none bench/kv-tiers.sh                no pool tier
#
# Without POOL, a `strata serve` on a drive file in DIR serves the pool
# volume: the same disk as the SSD tier, reached over loopback NVMe/TCP.
set -euo pipefail
cd "$(dirname "$0")/.."

VALUE=${VALUE:-1M}
TOTAL=${TOTAL:-512M}
QD=${QD:-8}
REPEAT=${REPEAT:-2}
DIR=${DIR:-./strata-data/kv}
BIN=${BIN:-target/release/strata}
command -v fio >/dev/null || apt-get install -y -qq fio >/dev/null
[ -x "$BIN" ] || cargo build --release -p strata
mkdir -p "$DIR"
file="$DIR/bench.log"
out=${OUT:-bench/results/kv-tiers-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

POOL=${POOL:-}
SERVE_PID=
cleanup() {
    [ -z "$SERVE_PID" ] || kill "$SERVE_PID" 2>/dev/null || true
    rm -rf "$DIR/bench-serve" "$DIR/bench-pool.img"
}
trap cleanup EXIT
if [ -z "$POOL" ]; then
    read -r p1 p2 p3 < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(3)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
    vol=$(($(numfmt --from=iec "$TOTAL") * 3 / 2 >> 20))
    "$BIN" serve --data-dir "$DIR/bench-serve" --drive "$DIR/bench-pool.img:$((vol * 2))M" \
        --default-volume-size "${vol}M" --listen "127.0.0.1:$p1" --discovery "127.0.0.1:$p2" \
        --http "127.0.0.1:$p3" >"$out/serve.log" 2>&1 &
    SERVE_PID=$!
    POOL=tcp://127.0.0.1:$p1/nqn.2026-11.io.strata:default
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p1") 2>/dev/null && break
        sleep 0.1
    done
fi
pool_args=()
[ "$POOL" = none ] || pool_args=(--pool "$POOL")
bench_mbs() { # RW BS DEPTH -> MB/s and p99 usec of strata bench on the pool volume
    "$BIN" bench --target "$POOL" --rw "$1" --bs "$2" --iodepth "$3" --size "$TOTAL" --span "$TOTAL" --json -q |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["workloads"][0]["result"]
print("%.1f %.0f" % (r["bytes"]/r["duration_s"]/1e6, r["latency"]["p99_us"]))'
}

fio_mbs() { # RW BS DEPTH -> MB/s and p99 usec
    fio --name=kv --filename="$file" --rw="$1" --bs="$2" --direct=1 --ioengine=io_uring --iodepth="$3" \
        --size="$TOTAL" --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["write" if sys.argv[1]=="write" else "read"]
print("%.1f %.0f" % (d["bw_bytes"]/1e6, d["clat_ns"]["percentile"]["99.000000"]/1e3))' "$1"
}

for r in $(seq "$REPEAT"); do
    "$BIN" bench kv-tier --ssd "$file:2G" --value "$VALUE" --total "$TOTAL" --qd "$QD" "${pool_args[@]}" \
        --json >"$out/kv-tier-$r.json"
    read -r w wp99 < <(fio_mbs write 4M 4)
    read -r rd rp99 < <(fio_mbs randread "$VALUE" "$QD")
    pw="0 0" prd="0 0"
    if [ "$POOL" != none ]; then
        pw=$(bench_mbs write 1M 16)
        v=$(numfmt --from=iec "$VALUE")
        prd=$(bench_mbs randread $((v < 1048576 ? v : 1048576)) "$QD")
    fi
    python3 - "$out/kv-tier-$r.json" "$w" "$wp99" "$rd" "$rp99" $pw $prd <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
w, wp99, rd, rp99, pw, pwp99, prd, prp99 = map(float, sys.argv[2:10])
p = {x["phase"]: x for x in j["phases"]}
pool = f", {j['blocks_on_pool']} on the pool" if j.get("blocks_on_pool") is not None else ""
print(f"value {j['value_bytes']} B, depth {j['qd']}, {j['blocks_on_ssd']} of {j['blocks']} blocks on SSD{pool}")
for name in ("dram put", "dram get"):
    x = p[name]
    print(f"  {name:9} {x['gb_per_s']*1000:10.1f} MB/s  p99 {x['p99_us']:8.0f} us  (no copy: the value is shared)")
rows = [("ssd put", "fio", w, wp99), ("ssd get", "fio", rd, rp99)]
if "pool put" in p:
    rows += [("pool put", "raw", pw, pwp99), ("pool get", "raw", prd, prp99)]
for name, what, raw, raw99 in rows:
    x = p[name]
    print(f"  {name:9} {x['gb_per_s']*1000:10.1f} MB/s  p99 {x['p99_us']:8.0f} us   {what} {raw:8.1f} MB/s p99 {raw99:8.0f} us"
          f"   ratio {x['gb_per_s']*1000/raw:5.2f}")
PY
done
rm -f "$file"
echo "results in $out"
