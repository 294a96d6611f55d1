#!/bin/bash
# Kernel initiator against a three-node cluster, run inside ../shared/vm
# (nvmf-vm) by `tests/vm/run.sh cluster-kernel.sh` (which adds /vm/strata
# and /vm/etcd). In the guest: a private etcd and three `strata node`
# processes in three racks on 127.0.0.1, data on ext4 on a ramdisk, and a
# rep:3 volume. The Linux kernel's nvme-tcp driver finds the volume through a
# node that does not own it (discovery lists every node, each a path to
# it; a non-owner's path reads as non-optimized and forwards to the
# owner), connects to the owner, and writes and verifies with fio while one non-owner node is
# killed (-9) in the middle of the writes, while it is down (the volume
# degraded), and after it comes back and is resynced. Last, the owner and
# the node that was never killed are killed too: the resynced node takes the
# volume over alone and must serve every block written, including the ones
# it only got through the resync.
#
# PROTECT=ec:2+1 (tests/vm/cluster-ec-kernel.sh) runs the same on an
# erasure-coded volume (two data shards and one parity on the three
# nodes): the killed node's shards are rebuilt from the other two when it
# is back, and the last step kills the other non-owner instead, so that
# the owner decodes every block from its own shard and the rebuilt one.
#
# Output: PASS/FAIL lines and a summary; the exit status is the number of
# failures. On a failure the node and etcd logs go to the console.
set -euo pipefail
. /vm/lib.sh

STRATA=/vm/strata
ETCD=/vm/etcd
ETCD_URL=http://127.0.0.1:2379
# A node that cannot renew its lease for LEASE_TTL seconds stops serving
# (and stays out of the cluster until restarted). Under TCG, with fio and
# three nodes on two emulated CPUs, etcd sometimes answers only after 1-2 s,
# and a 3 s lease (what crates/strata/tests/cluster.rs uses on the host) was
# lost in the middle of the writes. 10 s is strata's default.
LEASE_TTL=${LEASE_TTL:-10}
export NO_COLOR=1            # plain node logs
PROTECT=${PROTECT:-rep:3}
VOL=clvol
NQN=nqn.2026-11.io.strata:$VOL
LOGS=/tmp/cluster-logs
FAILED=0
declare -a PID=()            # PID[i]: the process of node ni

# ---------------------------------------------------------------- helpers

check() { # check LABEL CMD...: PASS or FAIL line for print_summary
    local label=$1
    shift
    if "$@"; then pass "$label"; else fail "$label"; fi
}

# Node i (1..3) listens on fixed ports: NVMe/TCP I/O 442i, fabric 452i,
# discovery 801i, HTTP API 742i.
listen_port() { echo $((4420 + $1)); }
disc_port() { echo $((8010 + $1)); }
api_of() { echo "http://127.0.0.1:$((7420 + $1))"; }
# The API needs a token: n1's admin token, which every node takes.
export STRATA_TOKEN_FILE=/data/n1/api-token

# Starts node i (the same arguments on a restart): rack ri, a lease of
# LEASE_TTL s (a dead node's volumes move after that), a sparse 1 GiB
# drive file in its data dir on the ramdisk. Log: $LOGS/ni.log (appended).
start_node() {
    local i=$1 dir=/data/n$1
    mkdir -p "$dir"
    log "starting node n$i"
    "$STRATA" node --name "n$i" --etcd "$ETCD_URL" --label "rack=r$i" --lease-ttl "$LEASE_TTL" \
        --fabric "127.0.0.1:$((4520 + i))" --listen "127.0.0.1:$(listen_port "$i")" \
        --discovery "127.0.0.1:$(disc_port "$i")" --http "127.0.0.1:$((7420 + i))" \
        --data-dir "$dir" --drive "$dir/drive0.img:1G" >>"$LOGS/n$i.log" 2>&1 &
    PID[i]=$!
}

kill9_node() {
    local i=$1
    log "kill -9 node n$i (pid ${PID[i]})"
    kill -9 "${PID[i]}" 2>/dev/null || true
    wait "${PID[i]}" 2>/dev/null || true
    PID[i]=
}

# `strata pool status` (text) from node i's API; empty if it does not answer.
pool_status() {
    timeout 10 "$STRATA" pool status --api "$(api_of "$1")" 2>/dev/null || true
}

# The text status is two tables (crates/strata/src/pool_view.rs). Nodes:
# "NODE ID STATE DRIVES CAPACITY ALLOCATED FILL LABELS", capacity and
# allocated as "1.0 GiB" (two words), state "up", "down" or "up/out".
# Volumes: "VOLUME SIZE PROT OWNER STATE HOLDERS", size two words, the
# owner a node name ("-" when none), holders a comma-separated list of node
# names, each marked "*" when not in sync and "!" when down. The volume
# parser finds the PROT column (rep:N or ec:K+M) and counts from there.

# vol_field STATUS owner|replicas|in_sync|state: owner a node name (null
# when none), replicas and in_sync comma-separated node names.
vol_field() {
    awk -v v="$VOL" -v f="$2" '
        $1 == v {
            for (p = 2; p <= NF && $p !~ /^(rep|ec):/; p++) {}
            owner = $(p + 1); state = $(p + 2); holders = $(p + 3)
            if (owner == "-" || owner == "") owner = "null"
            n = split(holders, h, ",")
            replicas = ""; in_sync = ""
            for (i = 1; i <= n; i++) {
                name = h[i]; gsub(/[*!]/, "", name)
                if (name == "" || name == "-") continue
                replicas = replicas (replicas == "" ? "" : ",") name
                if (h[i] !~ /[*!]/) in_sync = in_sync (in_sync == "" ? "" : ",") name
            }
            if (f == "owner") print owner
            else if (f == "replicas") print replicas
            else if (f == "in_sync") print in_sync
            else print state
        }' <<<"$1"
}

# node_field STATUS NAME id|state; nodes_up STATUS (nodes whose state is up)
node_field() {
    awk -v n="$2" -v f="$3" '$1 == n && $2 ~ /^[0-9]+$/ { print (f == "id") ? $2 : $3 }' <<<"$1"
}
nodes_up() { awk '$2 ~ /^[0-9]+$/ && $3 == "up" { n++ } END { print n + 0 }' <<<"$1"; }

# The node index (1..3) of the volume's owner as node i sees it; empty if
# it has none.
owner_index() {
    local s name
    s=$(pool_status "$1")
    name=$(vol_field "$s" owner)
    [ -n "$name" ] && [ "$name" != null ] || return 1
    echo "${name#n}"
}

count_ids() { # count_ids "1,2,3" -> 3
    local IFS=,
    # shellcheck disable=SC2086
    set -- $1
    echo $#
}

# wait_until SECONDS WHAT CMD...: poll CMD every second.
wait_until() {
    local secs=$1 what=$2 t0=$SECONDS
    shift 2
    log "waiting (up to ${secs}s) for $what"
    while ! "$@"; do
        if [ $((SECONDS - t0)) -ge "$secs" ]; then
            log "timed out after ${secs}s waiting for $what"
            return 1
        fi
        sleep 1
    done
    log "after $((SECONDS - t0))s: $what"
}

# Conditions, each as node i sees the pool.
cond_nodes_up() { [ "$(nodes_up "$(pool_status "$1")")" = "$2" ]; }
# healthy, an owner, three replicas, all three in sync, all three nodes up
cond_healthy() {
    local s
    s=$(pool_status "$1")
    [ "$(vol_field "$s" state)" = healthy ] && [ "$(vol_field "$s" owner)" != null ] &&
        [ "$(count_ids "$(vol_field "$s" replicas)")" = 3 ] && [ "$(count_ids "$(vol_field "$s" in_sync)")" = 3 ] &&
        [ "$(nodes_up "$s")" = 3 ]
}
# degraded: node nk down and out of the in-sync set, the two others up and
# in it
cond_degraded() {
    local s k=$2
    s=$(pool_status "$1")
    [ "$(vol_field "$s" state)" = degraded ] && [ "$(node_field "$s" "n$k" state)" = down ] &&
        [ "$(nodes_up "$s")" = 2 ] &&
        [ "$(count_ids "$(vol_field "$s" in_sync)")" = 2 ] && ! grep -qw "n$k" <<<"$(vol_field "$s" in_sync | tr , ' ')"
}
# node i owns the volume (as node i sees it)
cond_owner_is() { [ "$(owner_index "$1" || true)" = "$2" ]; }
# node i's discovery log lists the volume at node j's I/O port, only there
cond_discovered_at() { [ "$(discovered_ports "$1")" = "$(listen_port "$2")" ]; }
# node i's discovery log lists the volume at every node's I/O port (each
# node is a path to it)
cond_discovered_everywhere() {
    [ "$(discovered_ports "$1" | sort | tr '\n' ' ')" = "$(listen_port 1) $(listen_port 2) $(listen_port 3) " ]
}
# The ANA state the kernel reads for its one path to the volume (sysfs:
# optimized, non-optimized, inaccessible, persistent-loss, change).
path_ana_state() { cat /sys/block/nvme*c*n1/ana_state 2>/dev/null | head -1; }

show_pool() { # show_pool I LABEL: print the status for the console log
    log "pool status via n$1 ($2; $(date -u +%T) UTC, the node logs' clock):"
    pool_status "$1" | sed 's/^/    /' >&2
    lease_losses
}

# A node that loses its lease logs "the node's lease is lost" and stays out
# of the cluster until it is restarted; only a killed node should go down.
lease_losses() { grep -H "lease is lost" "$LOGS"/n*.log >&2 || true; }

# fio jobs by region, each run once to write (do_verify=1: fio reads and
# checks every block after writing it) and again with verify_only=1 to check
# the same blocks later: fio regenerates the same offsets and data from the
# same job (same seed, randrepeat is on by default), so nothing needs saving.
# Regions of the 512 MiB volume, in MiB: A 0-32 (all in sync), K 48-88 (a
# node is killed while it is written), B 128-152 (that node down), C 192-216
# (after its resync). The sizes are small because under TCG a rep:3 volume
# takes only 20-300 4 KiB and 4-80 128 KiB writes a second, depending on how
# busy the host is (each write goes to three stores through the fabric, all
# on two emulated CPUs). K's writes are capped at 4 MiB/s so that they last
# at least 10 s however fast the machine: the kill comes after 3 s.
job_args() { # job_args REGION DEV
    local common=(--filename="$2" --verify=crc32c --verify_fatal=1 --group_reporting)
    case $1 in
    A4k) echo "${common[@]}" --rw=randwrite --bs=4k --iodepth=16 --numjobs=2 --size=2m --offset=0 --offset_increment=2m ;;
    A128k) echo "${common[@]}" --rw=write --bs=128k --iodepth=8 --size=24m --offset=8m ;;
    K128k) echo "${common[@]}" --rw=randwrite --bs=128k --iodepth=8 --size=40m --offset=48m --rate=,4m ;;
    B4k) echo "${common[@]}" --rw=randwrite --bs=4k --iodepth=16 --numjobs=2 --size=2m --offset=128m --offset_increment=2m ;;
    B128k) echo "${common[@]}" --rw=write --bs=128k --iodepth=8 --size=16m --offset=136m ;;
    C4k) echo "${common[@]}" --rw=randwrite --bs=4k --iodepth=16 --numjobs=2 --size=2m --offset=192m --offset_increment=2m ;;
    C128k) echo "${common[@]}" --rw=write --bs=128k --iodepth=8 --size=16m --offset=200m ;;
    # Multipath (SCENARIO=multipath): M through the owner's kill, capped at
    # 2 MiB/s so that it lasts 20 s, past the takeover; F after failback.
    M128k) echo "${common[@]}" --rw=randwrite --bs=128k --iodepth=8 --size=40m --offset=256m --rate=,2m ;;
    F4k) echo "${common[@]}" --rw=randwrite --bs=4k --iodepth=16 --numjobs=2 --size=2m --offset=320m --offset_increment=2m ;;
    # Through a SIGSTOP of the owner past its lease: 80 MiB at 2 MiB/s.
    S128k) echo "${common[@]}" --rw=randwrite --bs=128k --iodepth=8 --size=80m --offset=384m --rate=,2m ;;
    esac
}
WRITTEN=" "                  # the regions whose write + verify passed
fio_write() { # fio_write REGION DEV: write + verify
    # shellcheck disable=SC2046
    fio_run "write-$1" $(job_args "$1" "$2") --do_verify=1 || return 1
    WRITTEN+="$1 "
}
# fio_start REGION DEV: fio_write in the background, while a fault is
# injected; its output goes to a file (fio_run's summary line is added by
# fio_wait, in this shell).
fio_start() {
    fio_write "$1" "$2" >"$LOGS/fio-$1.out" 2>&1 &
    FIO_PID=$!
}
# fio_wait REGION: waits for fio_start's run, prints its output, adds its
# summary and notes the region written; returns fio's status.
fio_wait() {
    local rc=0 l
    wait "$FIO_PID" || rc=$?
    cat "$LOGS/fio-$1.out" >&2
    # (no process substitution: the guest has no /dev/fd)
    grep -E "^write-$1 " "$LOGS/fio-$1.out" >"$LOGS/fio-$1.summary" || true
    while IFS= read -r l; do SUMMARY+=("$l"); done <"$LOGS/fio-$1.summary"
    [ "$rc" != 0 ] || WRITTEN+="$1 "
    return "$rc"
}
fio_reverify() { # fio_reverify REGION DEV [TAG]: read back and verify only
    # shellcheck disable=SC2046
    fio_run "reverify-$1${3:+-$3}" $(job_args "$1" "$2") --verify_only=1
}
reverify_all() { # reverify_all DEV TAG REGION...: one PASS/FAIL line per region
    local dev=$1 tag=$2 r
    shift 2
    for r in "$@"; do
        # fio's verify_only replays the whole job: after a failed write it
        # would only report the blocks it never wrote.
        case $WRITTEN in *" $r "*) ;; *) log "$tag: not re-verifying region $r: its write failed"; continue ;; esac
        check "$tag: region $r reads back as written (fio verify_only, crc32c)" fio_reverify "$r" "$dev" "$tag"
    done
}

# The discovery log of node i: the transport service ids (ports) at which it
# lists $NQN, one a line.
discovered_ports() {
    nvme discover -t tcp -a 127.0.0.1 -s "$(disc_port "$1")" 2>/dev/null |
        awk -v nqn="$NQN" '
            /^=+Discovery Log Entry/ { if (s == nqn) print t; s = ""; t = "" }
            /^trsvcid:/ { t = $2 }
            /^subnqn:/ { s = $2 }
            END { if (s == nqn) print t }'
}

dump_logs() {
    local f
    log "---- logs (failure) ----"
    for f in "$LOGS"/n*.log; do
        [ -f "$f" ] || continue
        echo "==== $f (last 200 lines) ===="
        tail -n 200 "$f"
    done
    echo "==== $LOGS/etcd.log: requests that took 1 s or more ===="
    grep -E '"took":"([0-9]+\.[0-9]+|[0-9]+)s"' "$LOGS/etcd.log" |
        sed -E 's/.*"ts":"([^"]*)".*"took":"([^"]*)".*"request":"(.{0,80}).*/\1 took \2: \3/' | tail -n 40 || true
    echo "==== dmesg: I/O errors (guest uptime; UTC = $CLOCK0 + uptime) ===="
    dmesg | grep -E 'I/O Error|medium error|blk_update|failing I/O|Removing ctrl' | tail -n 40 || true
}

finish() {
    local rc=$?
    if [ "$rc" != 0 ] || [ "$FAILED" != 0 ]; then dump_logs; fi
}
trap finish EXIT

# ------------------------------------------------------------------ setup

# The node and etcd logs count in UTC, log and dmesg in seconds of uptime.
read -r up _ </proc/uptime
CLOCK0="$(date -u -d "@$(($(date +%s) - ${up%.*}))" +%T 2>/dev/null || date -u +%T) UTC"
log "uptime 0 was $CLOCK0"

log "ext4 on a ramdisk for the data dirs (the guest root is tmpfs: no O_DIRECT in 6.1)"
modprobe brd rd_nr=1 rd_size=$((3 * 1024 * 1024)) max_part=0
mkfs.ext4 -q -F /dev/ram0
mkdir -p /data "$LOGS" && mount /dev/ram0 /data

log "a private etcd on 127.0.0.1:2379 (peer 2380), data on the ramdisk"
# etcd stands in for the cluster's own etcd servers: it runs at nice -10 so
# that the nodes and fio on the same two CPUs do not starve it. A write that
# dirties a clean region waits for an etcd transaction (the owner's
# dirty-region log), and strata fails the host's write (Write Fault, DNR)
# when etcd does not answer within 5 s.
# (busybox has renice, not nice: the subshell renices itself and etcd
# inherits it, with every thread it starts)
(renice -n -10 -p "$BASHPID" >/dev/null && exec "$ETCD" --name vm --data-dir /data/etcd \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster vm=http://127.0.0.1:2380 --initial-cluster-state new \
    --logger zap --log-level warn) >"$LOGS/etcd.log" 2>&1 &
ETCD_PID=$!
etcd_healthy() { # GET /health over bash's /dev/tcp (no curl in the guest)
    local out
    out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379 && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>/dev/null) &&
        grep -q '"health":"true"' <<<"$out"
}
wait_until 30 "etcd healthy" etcd_healthy || die "etcd did not come up"

for i in 1 2 3; do start_node "$i"; done
check "three nodes up (pool status via n1)" wait_until 60 "three nodes up" cond_nodes_up 1 3
check "n2 sees three nodes up too" cond_nodes_up 2 3
check "n3 sees three nodes up too" cond_nodes_up 3 3
show_pool 1 "three nodes"
[ "$FAILED" = 0 ] || die "the cluster did not form"

log "strata volume create $VOL --size 512M --protect $PROTECT (through n1's API)"
if out=$("$STRATA" volume create "$VOL" --size 512M --protect "$PROTECT" --allow-any-host --api "$(api_of 1)" 2>&1); then
    echo "$out"
    pass "volume create $VOL $PROTECT 512M"
else
    echo "$out"
    fail "volume create $VOL $PROTECT 512M"
    die "no volume"
fi
check "volume healthy with an owner and 3 in-sync replicas" wait_until 60 "$VOL healthy" cond_healthy 1
show_pool 1 "volume created"
own=$(owner_index 1) || die "no owner"
# The two other nodes: k is killed later, s stays up until the end.
others=()
for i in 1 2 3; do [ "$i" = "$own" ] || others+=("$i"); done
k=${others[0]} s=${others[1]}
log "owner n$own (I/O port $(listen_port "$own")); n$k is killed later, n$s stays"
check "n$k agrees that n$own owns $VOL" cond_owner_is "$k" "$own"
check "n$s agrees that n$own owns $VOL" cond_owner_is "$s" "$own"

# ------------------------------------------------ discovery and connection

log "nvme discover at non-owner n$k's discovery port $(disc_port "$k")"
nvme discover -t tcp -a 127.0.0.1 -s "$(disc_port "$k")" >&2 || true
check "discovery at a non-owner (n$k) lists $VOL at every node's port" cond_discovered_everywhere "$k"
check "discovery at the other non-owner (n$s) agrees" cond_discovered_everywhere "$s"
# A non-owner's port is a path to the volume: same subsystem and
# namespace, non-optimized, its I/O forwarded to the owner.
if pdev=$(connect 127.0.0.1 "$(listen_port "$k")" "$NQN"); then
    check "the kernel sees n$k's port as a non-optimized path to $VOL" test "$(path_ana_state)" = non-optimized
    check "a read through n$k's path (forwarded to the owner)" \
        dd if="$pdev" of=/dev/null bs=4k count=256 iflag=direct status=none
    disconnect_all || true
else
    fail "the kernel connects to n$k's path to $VOL"
fi

# ------------------------------- multipath (tests/vm/cluster-multipath.sh)

# The ANA states the kernel holds for the volume's paths whose controller
# is live (a dead one keeps its last state), sorted, on one line.
live_path_states() {
    local p c
    for p in /sys/block/nvme*c*n1; do
        [ -e "$p/ana_state" ] || continue
        c=${p##*/}
        c=${c#nvme*c}
        c=nvme${c%n1}
        [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] && cat "$p/ana_state"
    done | sort | tr '\n' ' '
}
cond_live_paths() { [ "$(live_path_states)" = "$1" ]; }
uptime_ms() { # milliseconds since boot, to 10 ms (/proc/uptime)
    local u
    read -r u _ </proc/uptime
    echo $((10#${u/./} * 10))
}
# A QD 1 probe: 4 KiB direct writes in a loop at 300 MiB (its own blocks),
# recording the longest gap between two completions and the writes that
# failed, in $LOGS/probe.out ("MAX_MS ERRORS").
probe_start() {
    rm -f "$LOGS/probe.stop"
    (
        max=0 errs=0 last=$(uptime_ms)
        while [ ! -e "$LOGS/probe.stop" ]; do
            dd if=/dev/zero of="$1" bs=4k count=1 seek=$((76800 + RANDOM % 256)) oflag=direct conv=notrunc \
                status=none 2>>"$LOGS/probe.err" || errs=$((errs + 1))
            now=$(uptime_ms)
            gap=$((now - last))
            last=$now
            [ "$gap" -le "$max" ] || max=$gap
            echo "$max $errs" >"$LOGS/probe.out"
        done
    ) &
    PROBE_PID=$!
}
probe_stop() { # sets PROBE_MAX (ms) and PROBE_ERRS
    touch "$LOGS/probe.stop"
    wait "$PROBE_PID" 2>/dev/null || true
    read -r PROBE_MAX PROBE_ERRS <"$LOGS/probe.out" || { PROBE_MAX=?; PROBE_ERRS=?; }
}
# Node i sees an owner other than node j.
cond_owner_not() { local o; o=$(owner_index "$1") && [ "$o" != "$2" ]; }

# Reservations on the pool volume: host 1 (this kernel's host NQN) takes
# a Write Exclusive reservation through the multipath device; host 2 (a
# second host NQN and host ID, connected to a node that does not own the
# volume) registers through its own controller and preempts host 1, whose
# writes then conflict; host 2 releases and host 1 writes again.
resv_json() { nvme resv-report "$1" --eds --numd=1023 -o json 2>&1 | tr -d ' \n\t'; }
resv_two_hosts() {
    local dev=$1 r c2="" c hn2=nqn.2014-08.org.nvmexpress:uuid:22222222-2222-2222-2222-222222222222 path
    nvme resv-register "$dev" --nrkey=0xaaaa --rrega=0 || return 1
    nvme resv-acquire "$dev" --crkey=0xaaaa --rtype=1 --racqa=0 || return 1
    r=$(resv_json "$dev")
    echo "report through the multipath device: $r" >&2
    grep -q '"rtype":1' <<<"$r" && grep -q '"regctl":1' <<<"$r" || return 1
    dd if=/dev/zero of="$dev" bs=4k count=1 seek=80000 oflag=direct status=none || return 1
    path=$(owner_index 1 || true)
    [ "$path" = 1 ] && path=2 || path=1
    nvme connect -t tcp -a 127.0.0.1 -s "$(listen_port "$path")" -n "$NQN" --hostnqn="$hn2" \
        --hostid=22222222-2222-2222-2222-222222222222 >&2 || return 1
    for _ in $(seq 50); do
        for c in /sys/class/nvme/nvme*; do
            [ "$(cat "$c/hostnqn" 2>/dev/null)" = "$hn2" ] && c2=/dev/${c##*/}
        done
        [ -n "$c2" ] && break
        sleep 0.1
    done
    [ -n "$c2" ] || { echo "no controller for host 2" >&2; return 1; }
    nvme resv-register "$c2" -n 1 --nrkey=0xbbbb --rrega=0 || return 1
    nvme resv-acquire "$c2" -n 1 --crkey=0xbbbb --prkey=0xaaaa --rtype=1 --racqa=1 || return 1
    r=$(resv_json "$dev")
    echo "report after host 2's preempt: $r" >&2
    grep -q '"regctl":1' <<<"$r" && grep -q '"rtype":1' <<<"$r" || return 1
    if dd if=/dev/zero of="$dev" bs=4k count=1 seek=80001 oflag=direct status=none 2>/dev/null; then
        echo "host 1 wrote after it was preempted" >&2
        return 1
    fi
    nvme resv-release "$c2" -n 1 --crkey=0xbbbb --rtype=1 --rrela=0 || return 1
    nvme resv-register "$c2" -n 1 --crkey=0xbbbb --rrega=1 || return 1
    dd if=/dev/zero of="$dev" bs=4k count=1 seek=80002 oflag=direct status=none || return 1
    nvme disconnect -d "${c2#/dev/}" >&2 || true
    r=$(resv_json "$dev")
    echo "report at the end: $r" >&2
    grep -q '"rtype":0' <<<"$r" && grep -q '"regctl":0' <<<"$r"
}

multipath_scenario() {
    local dev="" rc new other
    log "nvme connect-all through non-owner n$k's discovery port: one connection per path"
    nvme connect-all -t tcp -a 127.0.0.1 -s "$(disc_port "$k")" --reconnect-delay=1 --ctrl-loss-tmo=120 >&2 || true
    for _ in $(seq 100); do
        dev=$(_nvmf_find_ns "$NQN") && break
        sleep 0.1
    done
    [ -n "$dev" ] || die "no device for $VOL after connect-all"
    nvme list-subsys >&2 || true
    check "connect-all: one device with a path through each node" test "$(ls -d /sys/block/nvme*c*n1 | wc -l)" = 3
    check "ANA: one optimized path (the owner n$own), two non-optimized" \
        wait_until 20 "the paths' ANA states" cond_live_paths "non-optimized non-optimized optimized "
    check "multipath: fio 4k randwrite + verify, every path up" fio_write A4k "$dev"

    log "fio 128k random writes through the multipath device; kill -9 the owner n$own while they run"
    probe_start "$dev"
    fio_start M128k "$dev"
    sleep 3
    kill9_node "$own"
    rc=0
    fio_wait M128k || rc=$?
    check "fio 128k randwrite + verify through the kill -9 of the owner: no I/O error" test "$rc" = 0
    probe_stop
    log "QD 1 probe through the owner's kill: longest pause ${PROBE_MAX} ms, ${PROBE_ERRS} failed writes"
    SUMMARY+=("probe owner-kill-9 longest_pause_ms=$PROBE_MAX failed_writes=$PROBE_ERRS")
    check "the QD 1 probe: no failed write through the owner's kill" test "$PROBE_ERRS" = 0
    check "a survivor owns $VOL" wait_until 60 "a new owner" cond_owner_not "$k" "$own"
    new=$(owner_index "$k" || true)
    log "new owner: n$new"
    check "ANA after the takeover: the survivors' paths, one optimized, one non-optimized" \
        wait_until 60 "the survivors' paths" cond_live_paths "non-optimized optimized "
    reverify_all "$dev" after-owner-kill A4k M128k

    log "the old owner n$own comes back: a non-optimized path again (failback)"
    probe_start "$dev"
    start_node "$own"
    check "n$own's path is back, non-optimized" \
        wait_until 120 "n$own's path" cond_live_paths "non-optimized non-optimized optimized "
    check "failback: fio 4k randwrite + verify with every path up" fio_write F4k "$dev"
    probe_stop
    log "QD 1 probe through the failback: longest pause ${PROBE_MAX} ms, ${PROBE_ERRS} failed writes"
    SUMMARY+=("probe failback longest_pause_ms=$PROBE_MAX failed_writes=$PROBE_ERRS")
    check "the QD 1 probe: no failed write through the failback" test "$PROBE_ERRS" = 0
    reverify_all "$dev" after-failback A4k M128k F4k

    # A frozen owner (SIGSTOP) past its lease: another node takes over
    # and fences the replicas; the frozen one wakes to find itself
    # deposed and serves nothing (its writes are refused by the fence).
    local frozen watcher
    frozen=$(owner_index "$own" || true)
    watcher=$own
    [ "$watcher" != "$frozen" ] || watcher=$k
    log "SIGSTOP the owner n$frozen past its lease while fio writes; then SIGCONT"
    probe_start "$dev"
    fio_start S128k "$dev"
    sleep 3
    kill -STOP "${PID[frozen]}"
    check "another node takes $VOL over from the frozen n$frozen" \
        wait_until 90 "a new owner" cond_owner_not "$watcher" "$frozen"
    sleep 5
    kill -CONT "${PID[frozen]}"
    rc=0
    fio_wait S128k || rc=$?
    check "fio 128k randwrite + verify through a SIGSTOP of the owner: no I/O error" test "$rc" = 0
    probe_stop
    log "QD 1 probe through the owner's freeze: longest pause ${PROBE_MAX} ms, ${PROBE_ERRS} failed writes"
    SUMMARY+=("probe owner-sigstop longest_pause_ms=$PROBE_MAX failed_writes=$PROBE_ERRS")
    check "the QD 1 probe: no failed write through the owner's freeze" test "$PROBE_ERRS" = 0
    check "the woken n$frozen is a non-optimized path again, one owner" \
        wait_until 120 "every path back" cond_live_paths "non-optimized non-optimized optimized "
    check "the woken n$frozen agrees it does not own $VOL" cond_owner_not "$frozen" "$frozen"
    reverify_all "$dev" after-sigstop A4k M128k F4k S128k
    check "nvme flush through the multipath device" nvme flush "$dev"
    check "reservations through the multipath device, and a preempt by a second host through another node" \
        resv_two_hosts "$dev"
    disconnect_all || true
    log "stopping the cluster"
    for other in 1 2 3; do
        [ -n "${PID[other]:-}" ] || continue
        kill -TERM "${PID[other]}" 2>/dev/null || true
        wait "${PID[other]}" 2>/dev/null || true
    done
    kill -TERM "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
    print_summary
    exit "$FAILED"
}
[ "${SCENARIO:-}" != multipath ] || multipath_scenario

# ctrl-loss-tmo bounds how long the kernel keeps retrying a lost owner; the
# owner stays up until the last step, where the host is disconnected.
dev=$(connect 127.0.0.1 "$(listen_port "$own")" "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=60) ||
    die "cannot connect to the owner"
nvme list >&2 || true
check "id-ns: 512 MiB of 4 KiB blocks" bash -c 'nvme id-ns "$0" | grep -qE "^nsze +: 0x20000"' "$dev"

# ------------------------------------------------------- healthy: region A

log "fio with all three replicas in sync: region A (4 KiB random + 128 KiB sequential)"
check "healthy: fio 4k randwrite 2 jobs QD16 + crc32c verify" fio_write A4k "$dev"
check "healthy: fio 128k write QD8 + crc32c verify" fio_write A128k "$dev"

# ------------------------------------------- kill -9 a non-owner mid-write

log "fio 128k random writes in region K; kill -9 n$k while they run"
fio_start K128k "$dev"
sleep 3
if kill -0 "$FIO_PID" 2>/dev/null; then
    kill9_node "$k"
    pass "n$k killed while fio was writing"
else
    kill9_node "$k"
    fail "fio K finished in under 3 s: n$k was killed after the writes, not during them"
fi
rc=0
fio_wait K128k || rc=$?
check "fio 128k randwrite + verify survives the kill -9 of a replica node" test "$rc" = 0

log "fio while n$k is down: region B"
check "degraded: fio 4k randwrite 2 jobs QD16 + crc32c verify" fio_write B4k "$dev"
check "degraded: fio 128k write QD8 + crc32c verify" fio_write B128k "$dev"
check "pool status (via owner n$own): degraded, n$k down and out of the in-sync set" \
    wait_until 30 "$VOL degraded" cond_degraded "$own" "$k"
check "pool status (via n$s) agrees: degraded" cond_degraded "$s" "$k"
check "n$own still owns $VOL (a replica's death does not move it)" cond_owner_is "$s" "$own"
show_pool "$own" "n$k down"

log "read back what was written before and during the kill"
reverify_all "$dev" degraded A4k A128k K128k
check "nvme flush while degraded" nvme flush "$dev"
sync

# ------------------------------------------------ restart, resync, verify

log "restart n$k with the same arguments; the owner resyncs what it missed"
start_node "$k"
seen_resyncing=0
cond_healthy_note() { # as cond_healthy via the owner, noting a "resyncing" on the way
    local st
    st=$(vol_field "$(pool_status "$own")" state)
    [ "$st" = resyncing ] && seen_resyncing=1
    cond_healthy "$own"
}
check "n$k back: volume healthy again, 3 in sync (resync)" wait_until 300 "$VOL healthy after the resync" cond_healthy_note
log "pool status showed resyncing on the way: $seen_resyncing"
check "n$k is up and in sync as n$s sees it" cond_healthy "$s"
show_pool "$own" "n$k resynced"
reverify_all "$dev" resynced A4k A128k K128k B4k B128k
check "healthy again: fio 4k randwrite + verify" fio_write C4k "$dev"
check "healthy again: fio 128k write + verify" fio_write C128k "$dev"
check "nvme flush after the resync" nvme flush "$dev"

# ------------------------------- erasure coded: the rebuilt shards decode

if [ "$PROTECT" != rep:3 ]; then
    # Any two of the three shards decode a stripe. Kill the node that was
    # never down: the owner must now read every strip that lived there
    # from its own shard and n$k's rebuilt one.
    log "kill -9 n$s: the owner decodes from its shard and n$k's rebuilt one"
    kill9_node "$s"
    reverify_all "$dev" "n$s-down-decoded" A4k A128k K128k B4k B128k C4k C128k
    check "nvme flush with n$s down" nvme flush "$dev"
    disconnect_all || true
    log "stopping the cluster"
    for i in "$own" "$k"; do kill -TERM "${PID[i]}" 2>/dev/null || true; wait "${PID[i]}" 2>/dev/null || true; done
    kill -TERM "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
    check "no node lost its etcd lease (only the killed ones went down)" bash -c '! grep -q "lease is lost" "$0"/n*.log' "$LOGS"
    print_summary
    exit "$FAILED"
fi

# ----------------------------- the resynced replica alone serves it all

# The host reads only from the owner, so the checks above do not prove that
# n$k holds what it missed. Kill the owner and n$s: n$k, in sync again, is
# the only holder left, takes the volume over after the owner's lease, and
# must serve every region, B and the end of K only from its resync.
log "kill -9 the owner n$own and n$s: the resynced n$k must take $VOL over alone"
kill9_node "$own"
kill9_node "$s"
check "n$k takes the volume over" wait_until 60 "n$k owns $VOL" cond_owner_is "$k" "$k"
show_pool "$k" "n$k alone"
disconnect_all || true
check "discovery at n$k lists $VOL at its own port $(listen_port "$k")" \
    wait_until 30 "n$k's discovery to list $VOL at its port" cond_discovered_at "$k" "$k"
# A new owner serves once it has fenced the replicas and repaired the
# dirty regions: retry the connect until then.
dev=
for _ in $(seq 30); do
    dev=$(connect 127.0.0.1 "$(listen_port "$k")" "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=60) && break
    dev=
    sleep 1
done
if [ -n "$dev" ]; then
    pass "host connects to n$k, the new owner"
    reverify_all "$dev" "resynced-n$k-alone" A4k A128k K128k B4k B128k C4k C128k
    check "nvme flush on the lone owner" nvme flush "$dev"
    disconnect_all || true
else
    fail "host connects to n$k, the new owner"
fi

log "stopping the cluster"
kill -TERM "${PID[k]}" 2>/dev/null || true
wait "${PID[k]}" 2>/dev/null || true
kill -TERM "$ETCD_PID" 2>/dev/null || true
wait "$ETCD_PID" 2>/dev/null || true

check "no node lost its etcd lease (only the killed ones went down)" bash -c '! grep -q "lease is lost" "$0"/n*.log' "$LOGS"
log "node logs: errors, and how many warnings of each kind"
grep -H "ERROR" "$LOGS"/n*.log >&2 || true
grep -h " WARN " "$LOGS"/n*.log | sed -E 's/^[^ ]+ +WARN +//; s/ (node|region|error)=.*//' | sort | uniq -c | sort -rn | head -n 20 >&2 || true
log "etcd: requests it logged as slow (over 100 ms), and the slowest, in seconds"
grep -o '"took":"[0-9.]*[mµ]*s"' "$LOGS/etcd.log" | awk -F'"' '
    { t = $4; v = t + 0; if (t ~ /ms$/) v /= 1e3; else if (t ~ /µs$/) v /= 1e6; n++; if (v > max) max = v }
    END { printf "    %d slow, slowest %.2f\n", n, max }' >&2 || true
print_summary
exit "$FAILED"
