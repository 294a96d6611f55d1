#!/bin/bash
# Side-by-side: strata serve (RAM drive) vs the transport-limit server, with
# the same `strata bench` jobs, the server pinned to one core and the load
# generator to another, as SPDK's nvmf_tgt / spdk_nvme_perf were measured.
#
#   bench/strata-vs-limit.sh                 # RUNTIME=10 REPEAT=3
#   SERVER_CPU=0 CLIENT_CPU=1 RUNTIME=5 REPEAT=1 bench/strata-vs-limit.sh
#   POLL_US=0 bench/strata-vs-limit.sh       # client sleeps between completions
#   STRATA=/path/to/old/strata bench/strata-vs-limit.sh   # another build
#   BASELINE=/path/to/old/strata bench/strata-vs-limit.sh # a third server in
#       the same rotation, and a strata/baseline column: before/after a change
#
# Prints, per workload, the median over REPEAT runs of IOPS, MB/s and
# p50/p99/p99.9 latency for both servers and the strata/limit ratio, and
# writes the raw JSON results to bench/results/ (git-ignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RUNTIME=${RUNTIME:-10}
REPEAT=${REPEAT:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
# Busy-poll budget of the measured runs, microseconds (0: sleep between
# completions). spdk_nvme_perf polls and never sleeps, and the client has
# its own core here, so strata bench polls too: a sleeping client costs the
# server a wake-up per batch of completions, which would be charged to the
# server's core and skew the comparison with SPDK's figures.
POLL_US=${POLL_US:-100}
out=bench/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"

cargo build --release -p strata -p transport-limit >&2
STRATA=${STRATA:-$root/target/release/strata}
LIMIT=$root/target/release/transport-limit
NQN=nqn.2026-11.io.strata:default
data=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$data"' EXIT

wait_port() { # wait_port PORT PID: the server PID must be alive and listening
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || { echo "server exited; is port $1 in use? see $out/*.log" >&2; exit 1; }
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server did not listen on port $1" >&2
    exit 1
}

start_strata() { # start_strata BINARY LABEL PORT (the port + 1 and + 2 serve discovery and HTTP)
    rm -rf "${data:?}/$2"
    taskset -c "$SERVER_CPU" "$1" serve --data-dir "$data/$2" --drive mem:2G --default-volume-size 1G \
        --listen "127.0.0.1:$3" --discovery "127.0.0.1:$(($3 + 1))" --http "127.0.0.1:$(($3 + 2))" >"$out/$2.log" 2>&1 &
    SERVER=$!
    wait_port "$3" "$SERVER"
    # Write the namespace once so that reads hit allocated extents.
    taskset -c "$CLIENT_CPU" "$STRATA" bench --target "tcp://127.0.0.1:$3/$NQN" --rw write --bs 128k --iodepth 8 \
        --size 1G --json >/dev/null
}

start_limit() {
    taskset -c "$SERVER_CPU" "$LIMIT" 127.0.0.1:4491 1024 >"$out/limit.log" 2>&1 &
    SERVER=$!
    wait_port 4491 "$SERVER"
}

# name | strata bench arguments
WORKLOADS=(
    "randread-4k-qd1-j1|--rw randread --bs 4k --iodepth 1 --jobs 1"
    "randread-4k-qd32-j1|--rw randread --bs 4k --iodepth 32 --jobs 1"
    "randread-4k-qd32-j4|--rw randread --bs 4k --iodepth 32 --jobs 4"
    "randread-4k-qd1-j4|--rw randread --bs 4k --iodepth 1 --jobs 4"
    "randwrite-4k-qd32-j1|--rw randwrite --bs 4k --iodepth 32 --jobs 1"
    "read-128k-qd8-j1|--rw read --bs 128k --iodepth 8 --jobs 1"
)

run_one() { # run_one LABEL PORT SUBNQN NAME REPEAT ARGS...
    local label=$1 port=$2 nqn=$3 name=$4 r=$5 poll=$POLL_US
    shift 5
    # Several polling jobs on the one client core spend it spinning on
    # empty sockets (measured: 4 jobs reached 346K IOPS against the
    # transport limit polling, 680K sleeping), so multi-job runs sleep.
    case " $* " in *" --jobs 1 "*) ;; *) poll=0 ;; esac
    taskset -c "$CLIENT_CPU" "$STRATA" bench --target "tcp://127.0.0.1:$port/$nqn" "$@" \
        --runtime "${RUNTIME}s" --poll-us "$poll" --json -q >"$out/$label.$name.$r.json"
}

echo "server on CPU $SERVER_CPU, strata bench on CPU $CLIENT_CPU (--poll-us $POLL_US with one job), ${RUNTIME}s x $REPEAT per workload" >&2
# Both servers stay up (the idle one costs nothing) and their runs
# alternate, so that a noisy stretch of the shared host hits both sides of
# a ratio rather than one.
start_limit
LIMIT_PID=$SERVER
start_strata "$STRATA" strata 4480
STRATA_PID=$SERVER
BASELINE_PID=
if [ -n "${BASELINE:-}" ]; then
    start_strata "$BASELINE" baseline 4470
    BASELINE_PID=$SERVER
fi
for w in "${WORKLOADS[@]}"; do
    name=${w%%|*}
    read -r -a args <<<"${w#*|}"
    for r in $(seq "$REPEAT"); do
        run_one limit 4491 nqn.test:limit "$name" "$r" "${args[@]}"
        run_one strata 4480 "$NQN" "$name" "$r" "${args[@]}"
        if [ -n "$BASELINE_PID" ]; then
            run_one baseline 4470 "$NQN" "$name" "$r" "${args[@]}"
        fi
    done
done
kill "$LIMIT_PID" 2>/dev/null || true
kill -TERM "$STRATA_PID" $BASELINE_PID
wait "$LIMIT_PID" "$STRATA_PID" $BASELINE_PID 2>/dev/null || true

python3 - "$out" "${WORKLOADS[@]}" <<'EOF'
import json, statistics, sys, glob
out, workloads = sys.argv[1], [w.split("|")[0] for w in sys.argv[2:]]
baseline = bool(glob.glob(f"{out}/baseline.*.json"))
def med(label, name, key):
    vals = []
    for f in sorted(glob.glob(f"{out}/{label}.{name}.*.json")):
        r = json.load(open(f))
        r = r["workloads"][0]["result"]
        vals.append(r["latency"][key] if key.endswith("_us") else r[key])
    return statistics.median(vals) if vals else float("nan")
extra = f" {'baseline':>12} {'strata/base':>12}" if baseline else ""
print(f"{'workload':<22} {'metric':<8} {'limit':>12} {'strata':>12} {'strata/limit':>13}{extra}")
for w in workloads:
    for key, fmt in [("iops", "{:.0f}"), ("mbps", "{:.1f}"), ("p50_us", "{:.1f}"), ("p99_us", "{:.1f}"), ("p999_us", "{:.1f}")]:
        a, b = med("limit", w, key), med("strata", w, key)
        ratio = b / a if a else float("nan")
        line = f"{w:<22} {key:<8} {fmt.format(a):>12} {fmt.format(b):>12} {ratio:>13.2f}"
        if baseline:
            c = med("baseline", w, key)
            line += f" {fmt.format(c):>12} {(b / c if c else float('nan')):>12.2f}"
        print(line)
print(f"(raw results: {out})")
EOF
