#!/bin/bash
# DH-HMAC-CHAP between strata and the Linux kernel's initiator, inside
# ../shared/vm (nvmf-vm) with the trixie suite (Linux 6.12, nvme-cli 2.13):
#   tests/vm/run.sh kernel-dhchap.sh --suite trixie
# kernel-initiator.sh also sources it at its end where the kernel has
# nvme-auth, so CI runs it without another boot.
#
# Keys come from nvme gen-dhchap-key and go to strata with strata host
# add/set. Checked: unidirectional and bidirectional authentication with
# verified I/O; a wrong key, no key and an intruder NQN refused; the host
# refusing a controller with the wrong controller key; the hash and DH
# group strata is told to use; rotation (the connected controller keeps
# working, the old key is refused, the new one works). The first steps are
# repeated against the kernel's own target (nvmet) in the same VM, for the
# reference behaviour.
set -euo pipefail
[ -n "${SUMMARY+x}" ] || . /vm/lib.sh

DH_STRATA=/vm/strata
DH_DATA=/tmp/strata-dhchap
DH_PORT=4430
DH_API=http://127.0.0.1:4432
DH_NQN=nqn.2026-11.io.strata:default
read -r DH_HOSTNQN </etc/nvme/hostnqn
read -r DH_HOSTID </etc/nvme/hostid
DH_INTRUDER=nqn.2014-08.org.nvmexpress:uuid:66666666-6666-4666-8666-666666666666

dh_connect() { # dh_connect PORT NQN ARGS...: print the device
    local port=$1 nqn=$2
    shift 2
    connect 127.0.0.1 "$port" "$nqn" --hostnqn="$DH_HOSTNQN" --hostid="$DH_HOSTID" "$@"
}

dh_refused() { # dh_refused PORT NQN ARGS...
    local port=$1 nqn=$2
    shift 2
    connect_refused 127.0.0.1 "$port" "$nqn" --hostnqn="$DH_HOSTNQN" --hostid="$DH_HOSTID" "$@"
}

# dh_io LABEL PORT NQN WANT ARGS...: connect with ARGS, check that the kernel
# says it authenticated (with WANT in the line, e.g. "hmac(sha512)"), and
# verified dd I/O; disconnect.
dh_io() {
    local label=$1 port=$2 nqn=$3 want=$4 dev line
    shift 4
    dmesg -C
    if ! dev=$(dh_connect "$port" "$nqn" "$@"); then
        fail "$label: connect failed: $(dmesg | tail -n 3 | tr '\n' ' ')"
        return 0
    fi
    line=$(dmesg | grep -m1 'qid 0: authenticated' || true)
    if [ -z "$line" ]; then
        fail "$label: connected but the kernel logged no authentication: $(dmesg | tail -n 3 | tr '\n' ' ')"
    elif ! grep -qF -- "$want" <<<"$line"; then
        fail "$label: authenticated, but not with $want: $line"
    elif dd_check "$dev"; then
        pass "$label: connect + 4 MiB dd write/read-back on $dev (kernel: ${line##*: })"
    else
        fail "$label: dd I/O on $dev"
    fi
    disconnect_all
}

if ! modprobe nvme-auth 2>/dev/null || ! nvme gen-dhchap-key --nqn=nqn.2014-08.org.example:probe >/dev/null 2>&1; then
    log "kernel-dhchap: this kernel or nvme-cli has no DH-HMAC-CHAP (use --suite trixie); skipped"
    return 0 2>/dev/null || exit 0
fi
modprobe nvme-tcp

log "kernel-dhchap: strata on a RAM drive, port $DH_PORT"
"$DH_STRATA" serve --data-dir "$DH_DATA" --drive mem:512M --default-volume-size 128M \
    --listen 127.0.0.1:$DH_PORT --discovery 127.0.0.1:4431 --http 127.0.0.1:4432 \
    >>/tmp/strata-dhchap.out 2>>/tmp/strata-dhchap.log &
DH_PID=$!
for _ in $(seq 100); do tcp_probe 127.0.0.1 $DH_PORT 1 && break; sleep 0.2; done
export STRATA_API=$DH_API STRATA_TOKEN_FILE=$DH_DATA/api-token
dh_cli() { "$DH_STRATA" "$@"; }

host_key=$(nvme gen-dhchap-key --nqn="$DH_HOSTNQN" --hmac=1)
other_key=$(nvme gen-dhchap-key --nqn="$DH_HOSTNQN" --hmac=1)
new_key=$(nvme gen-dhchap-key --nqn="$DH_HOSTNQN" --hmac=2)
ctrl_key=$(nvme gen-dhchap-key --nqn="$DH_NQN" --hmac=1)
other_ctrl_key=$(nvme gen-dhchap-key --nqn="$DH_NQN" --hmac=1)

dh_cli host add "$DH_HOSTNQN" --dhchap-secret "$host_key" >&2
# A volume only this host may reach, for the intruder check.
dh_cli volume create secure --size 64M --allow-host "$DH_HOSTNQN" >&2
SECURE_NQN=nqn.2026-11.io.strata:secure

# 1. Unidirectional, strata's defaults (SHA-256, ffdhe2048).
dh_io "strata: unidirectional DH-HMAC-CHAP" $DH_PORT "$DH_NQN" "hmac(sha256) dhgroup ffdhe2048" \
    --dhchap-secret="$host_key"

# 2. A wrong key, no key, and an intruder NQN are refused.
if dh_refused $DH_PORT "$DH_NQN" --dhchap-secret="$other_key"; then pass "strata: wrong host key refused";
else fail "strata: wrong host key accepted"; fi
if dh_refused $DH_PORT "$DH_NQN"; then pass "strata: connect without a key refused";
else fail "strata: connect without a key accepted"; fi
if connect_refused 127.0.0.1 $DH_PORT "$SECURE_NQN" --hostnqn="$DH_INTRUDER" --dhchap-secret="$host_key"; then
    pass "strata: an intruder NQN refused on a volume allowed to the host only"
else fail "strata: an intruder NQN accepted"; fi
grep -q "authentication refused" /tmp/strata-dhchap.log &&
    pass "strata: refusals logged ($(grep -m1 -o 'authentication refused: [a-z ,'"'"']*' /tmp/strata-dhchap.log))" ||
    fail "strata: no log line for the refused authentications"

# 3. Bidirectional, with the hash and group strata is told to use.
dh_cli host set "$DH_HOSTNQN" --dhchap-ctrl-secret "$ctrl_key" --dhchap-hash sha512 --dhchap-dhgroup ffdhe4096 >&2
dh_io "strata: bidirectional DH-HMAC-CHAP, SHA-512, ffdhe4096, allowed-host volume" $DH_PORT "$SECURE_NQN" \
    "hmac(sha512) dhgroup ffdhe4096" --dhchap-secret="$host_key" --dhchap-ctrl-secret="$ctrl_key"

# 4. The host refuses a controller that does not know the key it expects.
if dh_refused $DH_PORT "$DH_NQN" --dhchap-secret="$host_key" --dhchap-ctrl-secret="$other_ctrl_key"; then
    pass "strata: wrong controller key refused by the host"
else fail "strata: wrong controller key accepted by the host"; fi

# 5. Rotation: a connected controller keeps working; the old key is refused
# from then on and the new one works.
dh_cli host set "$DH_HOSTNQN" --no-dhchap-ctrl --dhchap-hash sha256 --dhchap-dhgroup null >&2
dmesg -C
if dev=$(dh_connect $DH_PORT "$DH_NQN" --dhchap-secret="$host_key"); then
    dh_cli host set "$DH_HOSTNQN" --dhchap-secret "$new_key" >&2
    if dd_check "$dev"; then pass "strata: rotation keeps the connected host (dd after the key changed)";
    else fail "strata: I/O of the connected host after rotation"; fi
    # Re-authentication: the kernel re-runs DH-HMAC-CHAP on every queue
    # of the live controller when given a new secret.
    ctrl=$(ls /sys/class/nvme | head -n 1)
    dmesg -C
    echo -n "$new_key" >"/sys/class/nvme/$ctrl/dhchap_secret" || true
    for _ in $(seq 50); do dmesg | grep -q 'qid 0: authenticated' && break; sleep 0.2; done
    reauth=$(dmesg | grep -c 'authenticated' || true)
    if dmesg | grep -q 'qid 0: authenticated' && ! dmesg | grep -q 'authentication failed' && dd_check "$dev"; then
        pass "strata: re-authentication of the live controller with the new key ($reauth queues; dd after it)"
    else
        fail "strata: re-authentication with the new key: $(dmesg | grep -E 'nvme|auth' | tail -n 3 | tr '\n' ' ')"
    fi
    if dh_refused $DH_PORT "$DH_NQN" --duplicate-connect --dhchap-secret="$host_key"; then
        pass "strata: the old key is refused after rotation"
    else fail "strata: the old key still accepted after rotation"; fi
    disconnect_all
    dh_io "strata: the new key after rotation (NULL group)" $DH_PORT "$DH_NQN" "dhgroup null" --dhchap-secret="$new_key"
else
    fail "strata: connect before rotation"
fi
# The audit log kept the kernel host's attempts, and its chain holds.
audit=$(dh_cli audit tail -n 200 --json)
if grep -q '"auth-failed"' <<<"$audit" && grep -q '"auth-ok"' <<<"$audit" && grep -q "$DH_HOSTNQN" <<<"$audit"; then
    pass "strata: the audit log holds the kernel host's refused and accepted authentications"
else fail "strata: audit records missing: $(tail -n 3 <<<"$audit")"; fi
if dh_cli audit verify >&2; then pass "strata: audit verify: the chain is intact"; else fail "strata: audit verify"; fi
kill -TERM "$DH_PID"; wait "$DH_PID" || true

# 6. The reference: the same first steps against the kernel's target.
log "kernel-dhchap: the kernel's target (nvmet, file-backed) for reference"
modprobe loop 2>/dev/null || true
truncate -s 64M /tmp/nvmet-ref.img
REF_NQN=nqn.2014-08.org.example:dhchap-ref
if REF_DEV=$(losetup -f --show /tmp/nvmet-ref.img) && kernel_target_up "$REF_DEV" 4440 "$REF_NQN" &&
    kernel_target_add_host "$REF_NQN" "$DH_HOSTNQN" dhchap_key="$host_key" 'dhchap_hash=hmac(sha256)' \
        dhchap_dhgroup=ffdhe2048; then
    dh_io "nvmet (reference): unidirectional DH-HMAC-CHAP" 4440 "$REF_NQN" "hmac(sha256) dhgroup ffdhe2048" \
        --dhchap-secret="$host_key"
    if dh_refused 4440 "$REF_NQN" --dhchap-secret="$other_key"; then pass "nvmet (reference): wrong host key refused";
    else fail "nvmet (reference): wrong host key accepted"; fi
    if dh_refused 4440 "$REF_NQN"; then pass "nvmet (reference): connect without a key refused";
    else fail "nvmet (reference): connect without a key accepted"; fi
    kernel_target_down
    losetup -d "$REF_DEV" || true
else
    fail "nvmet (reference): could not set up the kernel target"
fi
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    print_summary
    exit "$FAILED"
fi
