#!/bin/bash
# Pool volumes against a single node, in one run: a private etcd and NODES
# `strata node` processes (racks r1, r2, ...) on loopback serve one pool
# volume per protection in VOLUMES (rep:1, rep:3 and ec:4+2 by default),
# and a plain `strata serve` serves a rep:1 volume as the baseline. The
# same `strata bench` workloads run against each volume's owner,
# interleaved (for each workload, each volume in turn, REPEAT rounds), and
# the medians are compared.
#
#   bench/pool.sh                                  # RUNTIME=10 REPEAT=3 SIZE=1G
#   RUNTIME=5 REPEAT=3 bench/pool.sh
#   STRATA_BIN=/tmp/strata-rel bench/pool.sh       # a prebuilt binary
#   NODES=3 VOLUMES="serve pool-rep1 pool-rep2 pool-rep3" bench/pool.sh
#                                                  # what bench/pool-rep.sh runs
#
# Environment:
#   STRATA_BIN  strata binary (default: target/release/strata; not built here)
#   ETCD        etcd binary (default: $STRATA_ETCD, else /usr/bin/etcd)
#   NODES       how many `strata node` processes, each in a rack of its own
#               (default 6: an ec:4+2 volume needs 6 racks)
#   VOLUMES     the volumes, in the order each round visits them (default
#               "serve pool-rep1 pool-rep3 pool-ec42"): "serve" (required)
#               is the baseline, pool-repN a rep:N pool volume, pool-ecKM an
#               ec:K+M one (K and M one digit each)
#   RUNTIME     seconds measured per run (default 10)
#   RAMP        seconds of warm-up before each measured run (default 1)
#   REPEAT      rounds; the table shows the median (default 3)
#   SIZE        size of each volume, written in full before the runs (default 1G)
#   DRIVE_DIR   where the drive files live (default: a temp dir in /dev/shm
#               when there is one, else in $TMPDIR): the servers share one
#               machine, and on one disk a rep:3 write would be three writes
#               to the same device, which a cluster does not do
#   POLL_US     strata bench --poll-us (default 0: the client sleeps; it
#               shares two cores with the servers and etcd)
#   WORKLOADS   space-separated subset of the workload names below
#   OUT         JSON result (default bench/results/pool-YYYYMMDD-HHMMSS.json)
#   HOLD=1      set up and prefill, print the targets and process ids, and
#               wait (for perf and friends) until Ctrl-C
#   KEEP_LOGS=1 keep the servers' logs and every run's output after a
#               successful run too (a failed one always keeps them)
#
# Prints, per workload, the medians for each volume and their ratio to the
# single-node rep:1: IOPS (4 KiB) or MiB/s (128 KiB), p99 latency, server
# CPU time per I/O ("all": every node and etcd for a pool volume, `strata
# serve` for the baseline; "own": the volume's owner alone), and the
# commits etcd made per second (the dirty-region log is saved there); then
# where each pool volume's data is (for rep:N, the share on its owner is
# what it reads locally; an ec:K+M volume has a strip of every stripe on
# each of its K+M nodes, data or parity, which allocation does not tell
# apart, so no share is given) and the load average. Writes every run, the
# medians and ranges to OUT. Every process it starts is killed on exit,
# Ctrl-C included.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
STRATA_BIN=${STRATA_BIN:-$root/target/release/strata}
ETCD=${ETCD:-${STRATA_ETCD:-/usr/bin/etcd}}
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-1}
REPEAT=${REPEAT:-3}
SIZE=${SIZE:-1G}
POLL_US=${POLL_US:-0}
NODES=${NODES:-6}
stamp=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$root/bench/results/pool-$stamp.json}

[ -x "$STRATA_BIN" ] || { echo "no strata binary at $STRATA_BIN: cargo build --release, or set STRATA_BIN" >&2; exit 2; }
[ -x "$ETCD" ] || { echo "no etcd at $ETCD: apt-get install etcd-server, or set ETCD" >&2; exit 2; }
for tool in python3 curl; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 2; }
done

# name | strata bench arguments
ALL_WORKLOADS=(
    "randread-4k-qd32|--rw randread --bs 4k --iodepth 32"
    "randread-4k-qd1|--rw randread --bs 4k --iodepth 1"
    "randwrite-4k-qd32|--rw randwrite --bs 4k --iodepth 32"
    "randwrite-4k-qd1|--rw randwrite --bs 4k --iodepth 1"
    "read-128k-qd8|--rw read --bs 128k --iodepth 8"
    "write-128k-qd8|--rw write --bs 128k --iodepth 8"
)
WORKLOADS_RUN=()
for w in "${ALL_WORKLOADS[@]}"; do
    if [ -z "${WORKLOADS:-}" ] || [[ " $WORKLOADS " == *" ${w%%|*} "* ]]; then
        WORKLOADS_RUN+=("$w")
    fi
done
[ ${#WORKLOADS_RUN[@]} -gt 0 ] || { echo "WORKLOADS=$WORKLOADS matches none of the workloads" >&2; exit 2; }

# The volumes, in the order each round visits them: "serve" is the rep:1
# volume of the plain single node, pool-repN the rep:N pool volume,
# pool-ecKM the ec:K+M one.
read -r -a VOLUMES <<<"${VOLUMES:-serve pool-rep1 pool-rep3 pool-ec42}"
declare -A PROTECT
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || { echo "NODES=$NODES is not a node count" >&2; exit 2; }
for v in "${VOLUMES[@]}"; do
    case $v in
        serve) PROTECT[$v]=rep:1 width=1 ;;
        pool-rep[1-9]) PROTECT[$v]=rep:${v#pool-rep} width=${v#pool-rep} ;;
        pool-ec[1-9][1-9]) PROTECT[$v]=ec:${v:7:1}+${v:8:1} width=$((${v:7:1} + ${v:8:1})) ;;
        *) echo "VOLUMES: $v is none of serve, pool-repN, pool-ecKM" >&2; exit 2 ;;
    esac
    # Copies and shards go to distinct racks, one node per rack here.
    [ "$width" -le "$NODES" ] || { echo "$v (${PROTECT[$v]}) needs $width racks, NODES=$NODES" >&2; exit 2; }
done
[[ " ${VOLUMES[*]} " == *" serve "* ]] || { echo "VOLUMES must include serve, the baseline of the ratios" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pool.XXXXXX")
if [ -z "${DRIVE_DIR:-}" ]; then
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then
        drives=$(mktemp -d /dev/shm/pool.XXXXXX)
    else
        drives=$tmp/drives
    fi
else
    drives=$(mktemp -d "$DRIVE_DIR/pool.XXXXXX")
fi
mkdir -p "$drives" "$tmp/runs"
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        # A process that does not stop within 5 s is killed.
        for _ in $(seq 50); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$drives"
    if [ "$rc" -ne 0 ] || [ -n "${KEEP_LOGS:-}" ]; then
        echo "logs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# die writes to the script's own stderr (fd 3) even from a check whose
# output wait_until discards.
exec 3>&2
die() {
    echo "pool: $*" >&3
    exit 1
}

# N loopback ports free at once (all held until every one is chosen).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))
EOF
}

wait_until() { # wait_until SECONDS WHAT COMMAND...: retry COMMAND every 0.2 s
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$end" ]; do
        "$@" >/dev/null 2>>"$tmp/wait.log" && return 0
        sleep 0.2
    done
    die "timed out after ${limit}s waiting for $what (logs in $tmp; last failed check: $(tail -n 3 "$tmp/wait.log" 2>/dev/null))"
}

alive() { kill -0 "$1" 2>/dev/null || die "process $1 exited (logs in $tmp)"; }

# etcd 2, each node 4, serve 3.
read -r -a ports <<<"$(free_ports $((2 + 4 * NODES + 3)))"
etcd_client=${ports[0]} etcd_peer=${ports[1]}
etcd_url=http://127.0.0.1:$etcd_client

# The size of the drives: room for every volume a node may hold (the
# files are sparse: only what is written takes memory). A node holds at
# most one copy of a rep:N chunk, so up to the whole volume, and of an
# ec:K+M volume one shard (SIZE/K) and its undo log (128 MiB,
# UNDO_LOG_BYTES in crates/strata-pool/src/opened.rs); 1 GiB on top for the
# store's own metadata.
size_bytes=$(python3 -c '
import sys
s = sys.argv[1].strip().upper().rstrip("B").rstrip("I")
m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
print(int(float(s[:-1]) * m[s[-1]]) if s[-1] in m else int(s))' "$SIZE")
drive_mib=1024
for v in "${VOLUMES[@]}"; do
    case ${PROTECT[$v]} in
        rep:*) [ "$v" = serve ] || drive_mib=$((drive_mib + (size_bytes + 1048575) / 1048576)) ;;
        ec:*)
            k=${PROTECT[$v]#ec:}
            k=${k%+*}
            drive_mib=$((drive_mib + (size_bytes / k + 1048575) / 1048576 + 128))
            ;;
    esac
done
serve_mib=$(((size_bytes + 1048575) / 1048576 + 1024))

echo "strata: $STRATA_BIN ($("$STRATA_BIN" --version))" >&2
echo "$NODES nodes, volumes ${VOLUMES[*]} of $SIZE, drive files of ${drive_mib} MiB in $drives," \
    "${RUNTIME}s (+${RAMP}s ramp) x $REPEAT rounds" >&2
load_start=$(cat /proc/loadavg)
echo "load average before starting anything: $load_start" >&2

# etcd's data sits with the drives (memory by default), as in the tests:
# etcd fsyncs every commit, and the shared disk is not what is measured.
"$ETCD" --name pool --data-dir "$drives/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "pool=http://127.0.0.1:$etcd_peer" --initial-cluster-state new \
    --logger zap --log-level warn >"$tmp/etcd.log" 2>&1 &
ETCD_PID=$!
PIDS+=("$ETCD_PID")
etcd_healthy() { alive "$ETCD_PID"; curl -sf -m 2 "$etcd_url/health" | grep -q '"health":"true"'; }
wait_until 30 "etcd to be healthy" etcd_healthy

# Node i: API, fabric, NVMe/TCP I/O and discovery ports.
NODE_PIDS=()
declare -A API
for i in $(seq "$NODES"); do
    b=$((2 + (i - 1) * 4))
    api=127.0.0.1:${ports[$b]}
    API[n$i]=$api
    mkdir -p "$tmp/n$i"
    "$STRATA_BIN" node --name "n$i" --etcd "$etcd_url" --label "rack=r$i" \
        --http "$api" --fabric "127.0.0.1:${ports[$((b + 1))]}" \
        --listen "127.0.0.1:${ports[$((b + 2))]}" --discovery "127.0.0.1:${ports[$((b + 3))]}" \
        --data-dir "$tmp/n$i" --drive "$drives/n$i.img:${drive_mib}M" >"$tmp/n$i.log" 2>&1 &
    NODE_PIDS+=($!)
    PIDS+=($!)
done
# The baseline: one `strata serve` with the same kind of drive file.
b=$((2 + NODES * 4))
serve_io=${ports[$b]}
"$STRATA_BIN" serve --data-dir "$tmp/serve" --drive "$drives/serve.img:${serve_mib}M" \
    --default-volume-size "$SIZE" --listen "127.0.0.1:$serve_io" \
    --discovery "127.0.0.1:${ports[$((b + 1))]}" --http "127.0.0.1:${ports[$((b + 2))]}" >"$tmp/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
# The API needs a token: every node of the pool takes n1's admin token.
export STRATA_TOKEN_FILE=$tmp/n1/api-token

status() { # the pool status JSON, from node n1
    "$STRATA_BIN" pool status --json --api "http://${API[n1]}"
}
all_up() {
    for p in "${NODE_PIDS[@]}"; do alive "$p"; done
    status | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(sum(n["state"]=="up" for n in s["nodes"]) != int(sys.argv[1]))' "$NODES"
}
# Every node up before the first volume: a volume is placed by the map it
# was created under.
wait_until 60 "$NODES nodes up in the pool" all_up

declare -A TARGET OWNER
TARGET[serve]=tcp://127.0.0.1:$serve_io/nqn.2026-11.io.strata:default
OWNER[serve]=serve
POOL_VOLUMES=()
for v in "${VOLUMES[@]}"; do [ "$v" = serve ] || POOL_VOLUMES+=("$v"); done
# Each volume created through a different node's API (any node will do).
i=0
for v in "${POOL_VOLUMES[@]}"; do
    i=$((i % NODES + 1))
    "$STRATA_BIN" volume create "$v" --size "$SIZE" --protect "${PROTECT[$v]}" --allow-any-host --api "http://${API[n$i]}" --json \
        >"$tmp/create-$v.json" || die "volume create $v (${PROTECT[$v]}) failed: $(cat "$tmp/create-$v.json")"
done

# Each volume healthy, every replica (or shard) in sync, its owner up:
# prints "owner-name owner-listen replicas" for volume $1.
owner_of() {
    status | python3 -c '
import json, sys
s = json.load(sys.stdin)
v = next(v for v in s["volumes"] if v["name"] == sys.argv[1])
assert v["state"] == "healthy" and v["owner"] is not None
assert sorted(v["in_sync"]) == sorted(v["replicas"])
n = next(n for n in s["nodes"] if n["id"] == v["owner"] and n["state"] == "up")
names = {n["id"]: n["name"] for n in s["nodes"]}
print(n["name"], n["listen"], ",".join(names[r] for r in v["replicas"]))' "$1"
}
for v in "${POOL_VOLUMES[@]}"; do
    wait_until 60 "$v healthy with an owner" owner_of "$v"
    read -r name listen replicas <<<"$(owner_of "$v")"
    TARGET[$v]=tcp://$listen/nqn.2026-11.io.strata:$v
    OWNER[$v]=$name
    echo "$v: ${PROTECT[$v]}, owner $name at $listen, copies or shards on nodes $replicas" >&2
done
wait_until 30 "strata serve" bash -c "exec 3<>/dev/tcp/127.0.0.1/$serve_io"

# CPU time (clock ticks) of each server process: "serve n1 ... nN etcd".
cpu_ticks() {
    local p f out=()
    for p in "$SERVE_PID" "${NODE_PIDS[@]}" "$ETCD_PID"; do
        read -r -a f <"/proc/$p/stat"
        # utime and stime are fields 14 and 15; the name (field 2) has no spaces here.
        out+=($((f[13] + f[14])))
    done
    echo "${out[*]}"
}
# Commits etcd made so far: the dirty-region log and membership changes
# are etcd writes, so their rate under a workload shows what it costs the
# metadata store.
etcd_commits() {
    curl -sf -m 2 "$etcd_url/metrics" | awk '$1 == "etcd_server_proposals_committed_total" { print $2 + 0 }'
}
allocated() { # allocated bytes per node, "n1=... n2=... ..."
    status | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(" ".join("%s=%d" % (n["name"], n["allocated_bytes"] or 0) for n in sorted(s["nodes"], key=lambda n: n["name"])))'
}

# Write every volume in full, so that reads hit allocated data (128 KiB
# writes at 128 KiB offsets: whole stripes of an ec:4+2 volume, whose
# strips are 4 KiB). An owner serves once it has fenced its replicas or
# shards; retry until it does. The node records report allocation each
# second: the growth per node while one volume is written says where its
# chunks are, hence how much of a rep:N volume the owner reads locally.
echo -n "" >"$tmp/placement.txt"
for v in "${VOLUMES[@]}"; do
    before=$(allocated)
    ok=
    for _ in $(seq 20); do
        if "$STRATA_BIN" bench --target "${TARGET[$v]}" --rw write --bs 128k --iodepth 8 --size "$SIZE" --json -q \
            >"$tmp/prefill-$v.json" 2>"$tmp/prefill-$v.err"; then
            ok=1
            break
        fi
        sleep 1
    done
    [ -n "$ok" ] || die "prefill of $v failed: $(cat "$tmp/prefill-$v.err")"
    if [ "$v" != serve ]; then
        sleep 2.5 # two reconcile passes: the node records catch up
        echo "$v ${PROTECT[$v]} ${OWNER[$v]} $before | $(allocated)" >>"$tmp/placement.txt"
    fi
    echo "prefilled $v" >&2
done

if [ -n "${HOLD:-}" ]; then
    # Keep everything up for profiling by hand; Ctrl-C (or SIGTERM to this
    # script) tears it down.
    echo "HOLD: serve pid $SERVE_PID, nodes n1..n$NODES pids ${NODE_PIDS[*]}, etcd pid $ETCD_PID at $etcd_url" >&2
    for v in "${VOLUMES[@]}"; do echo "HOLD: $v (owner ${OWNER[$v]}): ${TARGET[$v]}" >&2; done
    sleep infinity &
    PIDS+=($!)
    wait $!
fi

n_w=${#WORKLOADS_RUN[@]}
echo "running $n_w workloads x ${#VOLUMES[@]} volumes x $REPEAT rounds: about $((n_w * ${#VOLUMES[@]} * REPEAT * (RUNTIME + RAMP + 1) / 60 + 1)) min" >&2
clk=$(getconf CLK_TCK)
for w in "${WORKLOADS_RUN[@]}"; do
    name=${w%%|*}
    read -r -a args <<<"${w#*|}"
    for r in $(seq "$REPEAT"); do
        for v in "${VOLUMES[@]}"; do
            for p in "${PIDS[@]}"; do alive "$p"; done
            load=$(cut -d' ' -f1 /proc/loadavg)
            c0=$(cpu_ticks)
            e0=$(etcd_commits)
            "$STRATA_BIN" bench --target "${TARGET[$v]}" "${args[@]}" --runtime "${RUNTIME}s" --ramp "${RAMP}s" \
                --poll-us "$POLL_US" --json -q >"$tmp/runs/$v.$name.$r.json" 2>"$tmp/runs/$v.$name.$r.err" ||
                die "strata bench failed on $v ($name): $(cat "$tmp/runs/$v.$name.$r.err")"
            c1=$(cpu_ticks)
            e1=$(etcd_commits)
            echo "$v $name $r $load $clk $((${e1:-0} - ${e0:-0})) | $c0 | $c1" >>"$tmp/runs/meta.txt"
        done
        echo "  $name round $r/$REPEAT done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    done
done
load_end=$(cat /proc/loadavg)

mkdir -p "$(dirname "$OUT")"
vol_spec=()
for v in "${VOLUMES[@]}"; do vol_spec+=("$v=${PROTECT[$v]}"); done
python3 - "$tmp" "$OUT" "$load_start" "$load_end" "$RUNTIME" "$RAMP" "$REPEAT" "$SIZE" "$STRATA_BIN" "$POLL_US" \
    "$NODES" "${vol_spec[*]}" "$(basename "$0")" "${WORKLOADS_RUN[@]}" <<'EOF'
import json, os, re, statistics, subprocess, sys, time, glob
tmp, out, load_start, load_end, runtime, ramp, repeat, size, binary, poll, nodes, vol_spec, script = sys.argv[1:14]
workloads = [w.split("|", 1) for w in sys.argv[14:]]
protect = dict(kv.split("=") for kv in vol_spec.split())
# The baseline first: its column is the one the ratios divide by.
vols = ["serve"] + [v for v in protect if v != "serve"]
heads = {v: ("serve " if v == "serve" else "pool ") + protect[v] for v in vols}

procs = ["serve"] + [f"n{i}" for i in range(1, int(nodes) + 1)] + ["etcd"]
meta = {}
for line in open(f"{tmp}/runs/meta.txt"):
    head, c0, c1 = line.split("|")
    v, name, r, load, clk, commits = head.split()
    cpu = {p: (int(b) - int(a)) / int(clk) for p, a, b in zip(procs, c0.split(), c1.split())}
    meta[(v, name, int(r))] = (float(load), cpu, int(commits))

owners = {"serve": "serve"}
for line in open(f"{tmp}/placement.txt"):
    v, _, owner = line.split()[:3]
    owners[v] = owner

runs, summary = [], {}
for name, args in workloads:
    summary[name] = {"args": args}
    for v in vols:
        rs = []
        for f in sorted(glob.glob(f"{tmp}/runs/{v}.{name}.*.json")):
            r = int(f.rsplit(".", 2)[1])
            res = json.load(open(f))["workloads"][0]["result"]
            load, cpu, commits = meta[(v, name, r)]
            # The server processes behind the volume: `strata serve`, or
            # every node and etcd (nodes holding nothing of the volume
            # still run their reconcile passes).
            cpu_s = cpu["serve"] if v == "serve" else sum(cpu[p] for p in procs[1:])
            row = {
                "volume": v, "workload": name, "round": r, "load1": load,
                "iops": res["iops"], "mib_s": res["bytes"] / res["duration_s"] / 2**20,
                "p50_us": res["latency"]["p50_us"], "p99_us": res["latency"]["p99_us"],
                "p999_us": res["latency"]["p999_us"], "errors": res["errors"],
                "server_cpu_s": cpu_s, "cpu_s_by_process": cpu,
                "client_cpu_s": res["cpu"]["user_s"] + res["cpu"]["sys_s"],
                "etcd_commits_per_s": commits / (res["duration_s"] + float(ramp)),
            }
            # Server CPU per I/O over the whole run, ramp included (at the
            # measured rate).
            ios = res["ios"] * (res["duration_s"] + float(ramp)) / res["duration_s"]
            row["server_cpu_us_per_io"] = cpu_s * 1e6 / max(1.0, ios)
            row["owner_cpu_us_per_io"] = cpu[owners[v]] * 1e6 / max(1.0, ios)
            rs.append(row)
            runs.append(row)
        m = {}
        for k in ["iops", "mib_s", "p50_us", "p99_us", "p999_us", "server_cpu_us_per_io", "owner_cpu_us_per_io",
                  "etcd_commits_per_s"]:
            vals = [x[k] for x in rs]
            m[k] = statistics.median(vals)
            m[k + "_range"] = [min(vals), max(vals)]
        summary[name][v] = m
    for v in vols[1:]:
        base = summary[name]["serve"]
        summary[name][v]["ratio_to_serve"] = {
            k: summary[name][v][k] / base[k] if base[k] else None for k in ["iops", "mib_s", "p99_us"]}
        if "pool-rep1" in summary[name]:
            rep1 = summary[name]["pool-rep1"]
            summary[name][v]["ratio_to_pool_rep1"] = {
                k: summary[name][v][k] / rep1[k] if rep1[k] else None for k in ["iops", "mib_s", "p99_us"]}

placement = {}
for line in open(f"{tmp}/placement.txt"):
    left, right = line.split("|")
    v, prot, owner, *before = left.split()
    after = right.split()
    b = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in before}
    a = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in after}
    grown = {n: a[n] - b.get(n, 0) for n in a}
    total = sum(grown.values())
    placement[v] = {"owner": owner, "protection": prot, "allocated_growth_bytes": grown}
    if prot.startswith("rep:"):
        copies = int(prot[4:])
        # The fraction of the volume with a copy on its owner: what the
        # owner reads locally (the rest crosses the fabric).
        placement[v]["owner_local_fraction"] = grown.get(owner, 0) * copies / total if total else None
    else:
        # Each stripe has one strip on each of its K+M nodes, a data
        # strip or a parity strip depending on the chunk's placement
        # group, plus its undo log: allocation does not say which, so the
        # share of the data the owner reads locally (at most 1/K) is not
        # derived from it.
        placement[v]["owner_local_fraction"] = None

# Warnings and errors the servers logged (tracing's level column, colours
# stripped), so that a run that limped through retries says so.
ansi = re.compile(r"\x1b\[[0-9;]*m")
level = re.compile(r"^\S+\s+(WARN|ERROR)\s")
log_problems = {}
for p in procs:
    try:
        lines = [ansi.sub("", l).rstrip("\n") for l in open(f"{tmp}/{p}.log", errors="replace")]
    except FileNotFoundError:
        continue
    bad = [l for l in lines if level.match(l)]
    if bad:
        log_problems[p] = {"count": len(bad), "first": bad[:5]}

loads = [x["load1"] for x in runs]
result = {
    "benchmark": "pool", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "command": f"STRATA_BIN={binary} RUNTIME={runtime} RAMP={ramp} REPEAT={repeat} SIZE={size} POLL_US={poll} "
               f"NODES={nodes} VOLUMES='{' '.join(vols)}' bench/{script}",
    "nodes": int(nodes),
    "strata": subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip(),
    "strata_bin": binary, "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
    "loadavg_before": load_start, "loadavg_after": load_end,
    "load1_during": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
    "runtime_s": float(runtime), "ramp_s": float(ramp), "repeat": int(repeat), "size": size,
    "volumes": heads, "placement": placement, "log_warnings_errors": log_problems,
    "summary": summary, "runs": runs,
}
json.dump(result, open(out, "w"), indent=1)

def fmt(x, unit):
    return f"{x:.0f}" if unit == "IOPS" else f"{x:.1f}"
print()
print(f"{'workload':<18} {'metric':<10}" + "".join(f" {heads[v]:>12}" for v in vols)
      + "".join(f" {heads[v].replace('pool ', '') + '/serve':>12}" for v in vols[1:]))
for name, args in workloads:
    unit = "MiB/s" if "128k" in args else "IOPS"
    key = "mib_s" if unit == "MiB/s" else "iops"
    s = summary[name]
    for label, k in [(unit, key), ("p99 us", "p99_us"), ("all us/IO", "server_cpu_us_per_io"),
                     ("own us/IO", "owner_cpu_us_per_io")]:
        line = f"{name:<18} {label:<10}" + "".join(f" {fmt(s[v][k], unit if k == key else ''):>12}" for v in vols)
        line += "".join(f" {s[v][k] / s['serve'][k]:>12.2f}" for v in vols[1:])
        print(line)
    print(f"{name:<18} {'etcd op/s':<10}" + "".join(
        f" {'-' if v == 'serve' else format(s[v]['etcd_commits_per_s'], '.0f'):>12}" for v in vols))
print()
for v, p in placement.items():
    share = p["owner_local_fraction"]
    print(f"{v}: owner {p['owner']}, allocated growth per node while prefilled: "
          + ", ".join(f"{n} {b / 2**20:.0f} MiB" for n, b in sorted(p["allocated_growth_bytes"].items(),
                                                                     key=lambda x: int(x[0][1:])))
          + (f": {share:.0%} of the volume is on its owner" if share is not None else
             ": a shard (and its undo log) on each node"))
print(f"load average: before {load_start.split()[0]}, during (1-min, at run starts) "
      f"min {min(loads):.2f} median {statistics.median(loads):.2f} max {max(loads):.2f}, after {load_end.split()[0]}")
for p, e in log_problems.items():
    print(f"{p}.log: {e['count']} warnings or errors, the first: {e['first'][0][:200]}")
if not log_problems:
    print("no warnings or errors in the servers' logs")
print(f"(result: {out})")
EOF
