#!/bin/bash
# Kernel-initiator acceptance test, run inside ../shared/vm (nvmf-vm) by
# tests/vm/run.sh: strata serves from ext4 on a ramdisk in the guest and the
# Linux kernel's nvme-tcp driver discovers, connects, identifies, writes and
# verifies with fio, takes and gives back a reservation with nvme-cli,
# disconnects and reconnects, builds and checks an ext4
# file system, discards, and survives strata restarts (SIGTERM while
# connected, and kill -9 after a flush) with its data intact; then the same
# fio verification against a RAM drive, whose reads are lent, not copied;
# and, on the trixie suite, DH-HMAC-CHAP (kernel-dhchap.sh) and TLS
# (kernel-tls.sh).
set -euo pipefail
. /vm/lib.sh

STRATA=/vm/strata
DATA=/data/strata
NQN=nqn.2026-11.io.strata:default
RUNTIME=${RUNTIME:-5}
FAILED=0
check() { # check LABEL CMD...
    local label=$1
    shift
    if "$@"; then SUMMARY+=("$label: PASS"); log "PASS $label"; else SUMMARY+=("$label: FAILED"); log "FAIL $label"; FAILED=1; fi
}

log "ext4 on a ramdisk for the strata data dir (the guest root is tmpfs: no O_DIRECT)"
modprobe brd rd_nr=1 rd_size=$((3 * 1024 * 1024)) max_part=0
mkfs.ext4 -q -F /dev/ram0
mkdir -p /data && mount /dev/ram0 /data

# tmpfs gained O_DIRECT in Linux 6.6: 6.1 refuses it, 6.12 accepts it.
direct=0
dd if=/dev/zero of=/tmp/direct-probe bs=4096 count=1 oflag=direct 2>/dev/null && direct=1
rm -f /tmp/direct-probe
log "a drive on tmpfs (O_DIRECT in this kernel: $direct) is served with it, or refused with a clear message"
rc=0
timeout $((10 + 20 * (1 - direct))) "$STRATA" serve --data-dir /tmp/strata-tmpfs --drive /tmp/tmpfs-drive.img:64M \
    --listen 127.0.0.1:4500 --discovery 127.0.0.1:4501 --http 127.0.0.1:4502 >/tmp/tmpfs.out 2>&1 || rc=$?
cat /tmp/tmpfs.out >&2
if [ "$direct" = 1 ]; then
    check "tmpfs drive served where tmpfs has O_DIRECT" bash -c '[ "$0" = 124 ] && grep -q "serving" /tmp/tmpfs.out' "$rc"
else
    check "tmpfs drive refused, naming O_DIRECT" bash -c '[ "$0" = 1 ] && grep -q "O_DIRECT" /tmp/tmpfs.out' "$rc"
fi

start_strata() {
    "$STRATA" serve --data-dir "$DATA" --drive "$DATA/drive0.img:2G" --default-volume-size 1G \
        --listen 127.0.0.1:4420 --discovery 127.0.0.1:8009 --http 127.0.0.1:7420 >>/tmp/strata.out 2>>/tmp/strata.log &
    STRATA_PID=$!
    for _ in $(seq 100); do tcp_probe 127.0.0.1 4420 1 && return 0; sleep 0.2; done
    cat /tmp/strata.log >&2
    die "strata did not start listening"
}

start_strata
cat /tmp/strata.out

log "nvme discover"
disc=$(nvme discover -t tcp -a 127.0.0.1 -s 8009)
echo "$disc"
check "discover lists the default subsystem on 4420" \
    bash -c 'grep -q "subnqn: *'"$NQN"'" <<<"$0" && grep -q "trsvcid: *4420" <<<"$0"' "$disc"

dev=$(connect 127.0.0.1 4420 "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120)
nvme list
idctrl=$(nvme id-ctrl "$dev")
idns=$(nvme id-ns "$dev")
echo "$idctrl" | head -30
echo "$idns" | head -12
check "id-ctrl: model strata, subsystem NQN" \
    bash -c 'grep -qE "^mn +: strata" <<<"$0" && grep -qE "subnqn +: '"$NQN"'" <<<"$0"' "$idctrl"
check "id-ns: 1 GiB of 4 KiB blocks, thin" \
    bash -c 'grep -qE "^nsze +: 0x40000" <<<"$0" && grep -qE "^nsfeat +: 0x1" <<<"$0"' "$idns"
# Temperature Threshold (mandatory; SPDK's identify skips its health
# section when it is refused): the Composite's over threshold, FFFFh.
tmpth=$(nvme get-feature "$dev" -f 4 2>&1) || true
echo "$tmpth"
check "get-feature 4 (temperature threshold): FFFFh kelvins" bash -c 'grep -qi "0x0*ffff\b" <<<"$0"' "$tmpth"
# Asymmetric Namespace Access: with CMIC.ANA the kernel's multipath reads
# the ANA log at connect and shows each path's state (empty before); one
# node, one optimized path.
anastate=$(cat /sys/block/nvme*c*n1/ana_state 2>/dev/null | head -1 || true)
echo "ANA state of the path: $anastate"
check "ANA: the kernel sees one optimized path" test "$anastate" = optimized
analog=$(nvme ana-log "$dev" 2>&1) || true
echo "$analog"
check "nvme ana-log: group 1, optimized" bash -c 'grep -qiE "grpid[[:space:]:]+1" <<<"$0" && grep -qi "optimized" <<<"$0"' "$analog"

log "reservations through nvme-cli: register, acquire (Write Exclusive), report, write, release, unregister"
resv_report() { nvme resv-report "$dev" --eds --numd=1023 -o json 2>&1 | tr -d ' \n\t'; }
resv_check() {
    nvme resv-register "$dev" --nrkey=0xaaaa --rrega=0 || return 1
    nvme resv-acquire "$dev" --crkey=0xaaaa --rtype=1 --racqa=0 || return 1
    local r
    r=$(resv_report)
    echo "report while held: $r" >&2
    grep -q '"rtype":1' <<<"$r" && grep -q '"regctl":1' <<<"$r" || return 1
    dd if=/dev/zero of="$dev" bs=4k count=1 seek=10 oflag=direct status=none || return 1
    # Another key is refused (Reservation Conflict).
    if nvme resv-register "$dev" --nrkey=0xbbbb --rrega=0 2>/dev/null; then return 1; fi
    nvme resv-release "$dev" --crkey=0xaaaa --rtype=1 --rrela=0 || return 1
    nvme resv-register "$dev" --crkey=0xaaaa --rrega=1 || return 1
    r=$(resv_report)
    echo "report after: $r" >&2
    grep -q '"rtype":0' <<<"$r" && grep -q '"regctl":0' <<<"$r"
}
check "nvme resv-register/acquire/report/release against strata" resv_check

VERIFY_ARGS=(--filename="$dev" --rw=randwrite --bs=4k --iodepth=16 --numjobs=4 --size=32m
    --offset_increment=64m --verify=crc32c --verify_fatal=1 --group_reporting)
check "fio randwrite 4 jobs + crc32c verify" fio_run write-verify-4k "${VERIFY_ARGS[@]}" --do_verify=1
check "fio 128k writes (R2T path) + verify" fio_run write-verify-128k --filename="$dev" --rw=write --bs=128k \
    --iodepth=8 --size=48m --offset=512m --verify=crc32c --verify_fatal=1 --do_verify=1

log "disconnect, reconnect, read-verify what was written"
disconnect_all
dev=$(connect 127.0.0.1 4420 "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120)
check "read-verify after reconnect" fio_run reverify-4k "${VERIFY_ARGS[@]}" --verify_only=1

check "mkfs.ext4 + mount + write + fsck -fn + read back" fs_check "$dev"

log "file copies on ext4: copy a directory tree, remount, fsck, compare"
copy_tree_check() {
    local mnt=/mnt/strata-copy
    mkdir -p "$mnt"
    mkfs.ext4 -F -q "$dev" && mount "$dev" "$mnt" || return 1
    cp -a /usr "$mnt/usr-copy" && cp -a /lib "$mnt/lib-copy" 2>/dev/null || true
    sync
    umount "$mnt" || return 1
    e2fsck -fn "$dev" >&2 || return 1
    echo 3 >/proc/sys/vm/drop_caches
    mount -o ro "$dev" "$mnt" || return 1
    local rc=0
    diff -r /usr "$mnt/usr-copy" >&2 || rc=1
    log "copied $(du -sm "$mnt" | cut -f1) MiB in $(find "$mnt" -type f | wc -l) files"
    umount "$mnt"
    return $rc
}
check "ext4 tree copy, fsck clean, contents identical after remount" copy_tree_check

log "blkdiscard, then the device reads zeros"
blkdiscard "$dev"
check "discarded range reads zeros" cmp -n $((64 << 20)) "$dev" /dev/zero

log "restart strata (SIGTERM) while the host stays connected"
dd if=/dev/urandom of=/tmp/pattern bs=1M count=16 status=none
dd if=/tmp/pattern of="$dev" bs=1M seek=100 oflag=direct conv=fsync status=none
sum1=$(md5sum </tmp/pattern)
kill -TERM "$STRATA_PID"
wait "$STRATA_PID" || true
start_strata
for _ in $(seq 150); do [ -b "$dev" ] && dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct status=none 2>/dev/null && break; sleep 0.2; done
sum2=$(dd if="$dev" bs=1M skip=100 count=16 iflag=direct status=none | md5sum)
check "data intact after SIGTERM restart (host reconnected)" test "$sum1" = "$sum2"

log "kill -9 strata after a flush; restart; data must be there"
dd if=/dev/urandom of=/tmp/pattern2 bs=1M count=16 status=none
dd if=/tmp/pattern2 of="$dev" bs=1M seek=200 oflag=direct conv=fsync status=none
sum1=$(md5sum </tmp/pattern2)
kill -9 "$STRATA_PID"
wait "$STRATA_PID" || true
start_strata
for _ in $(seq 150); do dd if="$dev" of=/dev/null bs=4k count=1 iflag=direct status=none 2>/dev/null && break; sleep 0.2; done
sum2=$(dd if="$dev" bs=1M skip=200 count=16 iflag=direct status=none | md5sum)
check "flushed data intact after kill -9" test "$sum1" = "$sum2"
sum3=$(dd if="$dev" bs=1M skip=100 count=16 iflag=direct status=none | md5sum)
check "earlier data intact after kill -9" test "$(md5sum </tmp/pattern)" = "$sum3"

disconnect_all
kill -TERM "$STRATA_PID"; wait "$STRATA_PID" || true

log "a RAM drive: reads are sent from strata's memory (lent, not copied); the kernel verifies them"
"$STRATA" serve --data-dir /tmp/strata-mem --drive mem:512M --default-volume-size 256M \
    --listen 127.0.0.1:4420 --discovery 127.0.0.1:8009 --http 127.0.0.1:7420 >>/tmp/strata.out 2>>/tmp/strata.log &
STRATA_PID=$!
for _ in $(seq 100); do tcp_probe 127.0.0.1 4420 1 && break; sleep 0.2; done
dev=$(connect 127.0.0.1 4420 "$NQN")
check "mem drive: fio 4k randwrite 4 jobs QD 32 + crc32c verify" fio_run mem-verify-4k --filename="$dev" \
    --rw=randwrite --bs=4k --iodepth=32 --numjobs=4 --size=32m --offset_increment=48m --verify=crc32c \
    --verify_fatal=1 --do_verify=1 --group_reporting
check "mem drive: fio 128k writes + verify" fio_run mem-verify-128k --filename="$dev" --rw=write --bs=128k \
    --iodepth=8 --size=48m --offset=200m --verify=crc32c --verify_fatal=1 --do_verify=1
disconnect_all
kill -TERM "$STRATA_PID"; wait "$STRATA_PID" || true

# DH-HMAC-CHAP with the kernel host, where the kernel has it (the trixie
# run): sourced, so that it needs no boot of its own.
if [ -f /vm/kernel-dhchap.sh ]; then
    . /vm/kernel-dhchap.sh
fi
# NVMe/TCP in TLS 1.3 with the kernel host, where the guest has tlshd.
if [ -f /vm/kernel-tls.sh ]; then
    . /vm/kernel-tls.sh
fi

log "strata log (warnings and errors):"
grep -E "WARN|ERROR" /tmp/strata.log | tail -20 >&2 || true
print_summary
exit "$FAILED"
