#!/bin/bash
# The KV store's tiers against the raw device: `strata bench kv-tier`
# (put and get through the store's API, DRAM tier then SSD tier) and fio
# on the same file (sequential 4 MiB writes at depth 4, as the SSD log
# writes; random reads of one value at the same depth as the store's),
# side by side, REPEAT times, alternating.
#
#   bench/kv-tiers.sh                          1 MiB values, 512 MiB, depth 8
#   VALUE=256K TOTAL=1G QD=16 bench/kv-tiers.sh
#   DIR=/mnt/nvme bench/kv-tiers.sh            the file on another drive
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

fio_mbs() { # RW BS DEPTH -> MB/s and p99 usec
    fio --name=kv --filename="$file" --rw="$1" --bs="$2" --direct=1 --ioengine=io_uring --iodepth="$3" \
        --size="$TOTAL" --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["write" if sys.argv[1]=="write" else "read"]
print("%.1f %.0f" % (d["bw_bytes"]/1e6, d["clat_ns"]["percentile"]["99.000000"]/1e3))' "$1"
}

for r in $(seq "$REPEAT"); do
    "$BIN" bench kv-tier --ssd "$file:2G" --value "$VALUE" --total "$TOTAL" --qd "$QD" --json >"$out/kv-tier-$r.json"
    read -r w wp99 < <(fio_mbs write 4M 4)
    read -r rd rp99 < <(fio_mbs randread "$VALUE" "$QD")
    python3 - "$out/kv-tier-$r.json" "$w" "$wp99" "$rd" "$rp99" <<'PY' | tee -a "$out/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
w, wp99, rd, rp99 = map(float, sys.argv[2:6])
p = {x["phase"]: x for x in j["phases"]}
print(f"value {j['value_bytes']} B, depth {j['qd']}, {j['blocks_on_ssd']} of {j['blocks']} blocks on SSD")
for name in ("dram put", "dram get"):
    x = p[name]
    print(f"  {name:9} {x['gb_per_s']*1000:10.1f} MB/s  p99 {x['p99_us']:8.0f} us  (no copy: the value is shared)")
for name, raw, raw99 in (("ssd put", w, wp99), ("ssd get", rd, rp99)):
    x = p[name]
    print(f"  {name:9} {x['gb_per_s']*1000:10.1f} MB/s  p99 {x['p99_us']:8.0f} us   fio {raw:8.1f} MB/s p99 {raw99:8.0f} us"
          f"   ratio {x['gb_per_s']*1000/raw:5.2f}")
PY
done
rm -f "$file"
echo "results in $out"
