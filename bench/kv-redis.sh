#!/bin/bash
# strata kv serve against redis-server, side by side in one run, driven by
# the same redis-benchmark: SET and GET of 4 KiB and 1 MiB values, with and
# without pipelining. Prints requests/s, MB/s and strata/redis ratios.
#
#   bench/kv-redis.sh                 defaults below
#   REPEAT=3 CLIENTS=50 bench/kv-redis.sh
#   KV_ARGS="--threads 1" bench/kv-redis.sh    extra strata kv serve options
#
# Both servers run on loopback on this machine; redis-benchmark runs
# beside them, so the ratios (not the absolute rates) are the result.
# strata gets a DRAM tier big enough for the working set and its SSD tier
# file in a temporary directory; redis-server runs with persistence off.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT=${REPEAT:-2}
CLIENTS=${CLIENTS:-50}
N_SMALL=${N_SMALL:-50000}
N_LARGE=${N_LARGE:-2000}
KEYS=${KEYS:-1000}
BIN=${BIN:-target/release/strata}

for t in redis-server redis-benchmark redis-cli bc; do
    command -v "$t" >/dev/null || apt-get install -y -qq redis-server redis-tools bc >/dev/null
done
[ -x "$BIN" ] || cargo build --release -p strata

work=$(mktemp -d)
out=${OUT:-bench/results/kv-redis-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
cleanup() {
    [ -n "${rpid:-}" ] && kill "$rpid" 2>/dev/null || true
    [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

rport=16379
sport=16380
redis-server --port $rport --save "" --appendonly no --daemonize no --dir "$work" --protected-mode no \
    >"$out/redis-server.log" 2>&1 &
rpid=$!
RUST_LOG=warn "$BIN" kv serve --listen 127.0.0.1:$sport --dram 3G --ssd "$work/ssd.log:4G" ${KV_ARGS:-} \
    >"$out/strata-kv.log" 2>&1 &
spid=$!
for p in $rport $sport; do
    for _ in $(seq 100); do redis-cli -p $p PING >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p $p PING >/dev/null
done

# rps SERVER_PORT SIZE N PIPELINE TEST -> requests per second
rps() {
    timeout 600 redis-benchmark -p "$1" -d "$2" -n "$3" -P "$4" -c "$CLIENTS" -r "$KEYS" -t "$5" --csv 2>/dev/null |
        awk -F, 'NR==2 {gsub(/"/, "", $2); print $2}'
}

printf '%-6s %-8s %-4s %14s %14s %10s %10s %8s\n' test size pipe "redis rps" "strata rps" "redis MB/s" "strata MB/s" ratio |
    tee "$out/summary.txt"
for size in 4096 1048576; do
    n=$N_SMALL
    [ "$size" -ge 1048576 ] && n=$N_LARGE
    for pipe in 1 16; do
        for test in set get; do
            r_sum=0
            s_sum=0
            for _ in $(seq "$REPEAT"); do
                # Alternate the servers so that drift hits both.
                r=$(rps $rport $size $n $pipe $test)
                s=$(rps $sport $size $n $pipe $test)
                r_sum=$(echo "$r_sum + $r" | bc -l)
                s_sum=$(echo "$s_sum + $s" | bc -l)
            done
            r=$(echo "$r_sum / $REPEAT" | bc -l)
            s=$(echo "$s_sum / $REPEAT" | bc -l)
            printf '%-6s %-8s %-4s %14.0f %14.0f %10.1f %10.1f %8.2f\n' "$test" "$size" "$pipe" "$r" "$s" \
                "$(echo "$r * $size / 1000000" | bc -l)" "$(echo "$s * $size / 1000000" | bc -l)" \
                "$(echo "$s / $r" | bc -l)" | tee -a "$out/summary.txt"
        done
    done
done
echo "results in $out"
