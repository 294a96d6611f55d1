#!/bin/bash
# Guest side of bench/kernel-vs-strata.sh: the same fio jobs, through the
# kernel's NVMe/TCP initiator over the guest's loopback, against (1) the
# kernel's nvmet-tcp target on a brd ramdisk and (2) strata on a RAM drive
# (mem:), both 1 GiB and prefilled. Prints both results and the
# strata/kernel ratios. Under TCG emulation only the ratios mean anything.
set -euo pipefail
. /vm/lib.sh

RUNTIME=${RUNTIME:-10}
SIZE_MIB=1024
declare -A R

job() { # job TARGET DEV LABEL FIO_ARGS...
    local who=$1 dev=$2 label=$3 line
    shift 3
    line=$(fio_run "$label" --filename="$dev" --runtime="$RUNTIME" --time_based "$@" | tail -n1)
    echo "$who $line"
    R[$who.$label.iops]=$(sed -E 's/.*iops=([0-9]+).*/\1/' <<<"$line")
    R[$who.$label.mbs]=$(sed -E 's/.*\(([0-9.]+)MB\/s\).*/\1/' <<<"$line")
    R[$who.$label.p50]=$(sed -E 's/.*p50=([0-9.]+).*/\1/' <<<"$line")
    R[$who.$label.p99]=$(sed -E 's/.*p99=([0-9.]+) .*/\1/' <<<"$line")
}

prefill() { # prefill DEV: write every block once, so reads hit allocated pages/extents
    fio --name=prefill --filename="$1" --rw=write --bs=128k --iodepth=8 --ioengine=libaio --direct=1 \
        --size=${SIZE_MIB}m --output-format=terse >/dev/null
}

run_jobs() { # run_jobs TARGET DEV
    local who=$1 dev=$2
    job "$who" "$dev" randread-4k-qd32 --rw=randread --bs=4k --iodepth=32 --norandommap --randrepeat=0
    job "$who" "$dev" seqread-128k-qd8 --rw=read --bs=128k --iodepth=8
    # Total latency (submission + completion): with an in-kernel target the
    # whole round trip can happen inside io_submit, so completion latency
    # alone would flatter it.
    job "$who" "$dev" randread-4k-qd1 --rw=randread --bs=4k --iodepth=1 --norandommap --randrepeat=0 --lat_percentiles=1
}

log "kernel nvmet-tcp on a ${SIZE_MIB} MiB brd ramdisk"
modprobe brd rd_nr=1 rd_size=$((SIZE_MIB * 1024)) max_part=0
# Prefilled locally: 6.1's nvmet-tcp hits a usercopy BUG on large writes
# arriving over TCP in this VM (seen with 1 MiB writes), so the kernel
# target is only read from here.
prefill /dev/ram0
kernel_target_up /dev/ram0 4420 nqn.2014-08.org.example:bench-kernel
dev=$(connect 127.0.0.1 4420 nqn.2014-08.org.example:bench-kernel)
run_jobs kernel "$dev"
disconnect_all
kernel_target_down

log "strata on a ${SIZE_MIB} MiB RAM drive"
/vm/strata serve --data-dir /tmp/strata-bench --drive mem:$((SIZE_MIB + 64))M --default-volume-size ${SIZE_MIB}M \
    --listen 127.0.0.1:4421 --discovery 127.0.0.1:8010 --http 127.0.0.1:7421 >/tmp/strata.out 2>/tmp/strata.log &
pid=$!
for _ in $(seq 100); do tcp_probe 127.0.0.1 4421 1 && break; sleep 0.2; done
dev=$(connect 127.0.0.1 4421 nqn.2026-11.io.strata:default)
prefill "$dev"
run_jobs strata "$dev"
disconnect_all
kill -TERM "$pid"; wait "$pid" || true

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "==== strata / kernel nvmet-tcp (same VM, same fio jobs, RAM-backed, ${RUNTIME}s each) ===="
printf '%-34s %12s %12s %8s\n' metric kernel strata ratio
row() { printf '%-34s %12s %12s %8s\n' "$1" "$2" "$3" "$(ratio "$3" "$2")"; }
row "4k randread QD32 IOPS" "${R[kernel.randread-4k-qd32.iops]}" "${R[strata.randread-4k-qd32.iops]}"
row "128k seqread QD8 MB/s" "${R[kernel.seqread-128k-qd8.mbs]}" "${R[strata.seqread-128k-qd8.mbs]}"
row "4k randread QD1 IOPS" "${R[kernel.randread-4k-qd1.iops]}" "${R[strata.randread-4k-qd1.iops]}"
row "4k randread QD1 p50 latency us" "${R[kernel.randread-4k-qd1.p50]}" "${R[strata.randread-4k-qd1.p50]}"
row "4k randread QD1 p99 latency us" "${R[kernel.randread-4k-qd1.p99]}" "${R[strata.randread-4k-qd1.p99]}"
echo "(IOPS and MB/s: higher is better, ratio > 1 favours strata; latency: lower is better, ratio < 1 favours strata)"
