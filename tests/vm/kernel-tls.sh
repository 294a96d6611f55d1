#!/bin/bash
# NVMe/TCP inside TLS 1.3 (PSK) between strata and the Linux kernel's
# initiator (tlshd does the kernel's handshake), inside ../shared/vm
# (nvmf-vm) with the trixie suite (Linux 6.12, nvme-cli 2.13, ktls-utils):
#   tests/vm/run.sh kernel-tls.sh --suite trixie
# kernel-initiator.sh also sources it at its end where the guest has tlshd,
# so CI runs it without another boot.
#
# The PSK comes from nvme gen-tls-key --insert (which derives the TLS PSK
# into the kernel's .nvme keyring under "NVMe0R01 <hostnqn> <subnqn>") and
# goes to strata with strata host add --tls-psk, which derives the same
# key on its side. Checked: TLS connect with verified I/O and the
# controller's tls_key; plain TCP refused on the TLS-only port; a host
# strata has no PSK for refused; rotation (the connected controller keeps
# working, the old PSK is refused, the new one works); discovery over TLS
# reporting TREQ required and SECTYPE tls13; the refusals in strata's log.
# The first steps are repeated against the kernel's own target (nvmet with
# addr_tsas=tls1.3) in the same VM, for the reference behaviour.
set -euo pipefail
[ -n "${SUMMARY+x}" ] || . /vm/lib.sh

TLS_STRATA=/vm/strata
TLS_DATA=/tmp/strata-tls
TLS_PORT=4450
TLS_DISC=4451
TLS_API=http://127.0.0.1:4452
TLS_NQN=nqn.2026-11.io.strata:default
TLS_DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
read -r TLS_HOSTNQN </etc/nvme/hostnqn
read -r TLS_HOSTID </etc/nvme/hostid
TLS_INTRUDER=nqn.2014-08.org.nvmexpress:uuid:77777777-7777-4777-8777-777777777777

tls_help=$(nvme gen-tls-key --help 2>&1 || true)
if ! command -v tlshd >/dev/null || ! grep -q -- --insert <<<"$tls_help"; then
    log "kernel-tls: this guest has no tlshd or nvme gen-tls-key (use --suite trixie); skipped"
    return 0 2>/dev/null || exit 0
fi
modprobe nvme-tcp
tlshd_start

# A configured PSK from 32 random bytes, inserted for HOSTNQN toward the
# subsystem and the discovery subsystem (nvme gen-tls-key prints the
# same interchange key for the same secret).
tls_insert() { # tls_insert HEX HOSTNQN SUBNQN: print the interchange key
    nvme gen-tls-key --secret="$1" --hostnqn="$2" --subsysnqn="$3" --hmac=1 --insert | head -n1
}
tls_secret() { head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
secret=$(tls_secret)
psk=$(tls_insert "$secret" "$TLS_HOSTNQN" "$TLS_NQN")
tls_insert "$secret" "$TLS_HOSTNQN" "$TLS_DISC_NQN" >/dev/null
intruder_psk=$(tls_insert "$(tls_secret)" "$TLS_INTRUDER" "$TLS_NQN")
log "kernel-tls: keyring: $(awk '$8 == "psk" { print $9, $10, $11 }' /proc/keys | tr '\n' ';')"

ctrl_tls_key() { # the tls_key attribute of the controller of TLS_NQN
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$TLS_NQN" ] || continue
        cat "$c/tls_key" 2>/dev/null || true
        return 0
    done
}
tls_diag() { echo "kernel: $(dmesg | grep -E 'nvme|tls|handshake' | tail -n 3 | tr '\n' ' ') tlshd: $(tail -n 2 "$TLSHD_LOG" | tr '\n' ' ')"; }

log "kernel-tls: strata on a RAM drive, --tls required, port $TLS_PORT"
"$TLS_STRATA" serve --data-dir "$TLS_DATA" --drive mem:512M --default-volume-size 128M --tls required \
    --listen 127.0.0.1:$TLS_PORT --discovery 127.0.0.1:$TLS_DISC --http 127.0.0.1:4452 \
    >>/tmp/strata-tls.out 2>>/tmp/strata-tls.log &
TLS_PID=$!
for _ in $(seq 100); do tcp_probe 127.0.0.1 $TLS_PORT 1 && break; sleep 0.2; done
export STRATA_API=$TLS_API STRATA_TOKEN_FILE=$TLS_DATA/api-token
tls_cli() { "$TLS_STRATA" "$@"; }
tls_cli host add "$TLS_HOSTNQN" --tls-psk "$psk" >&2

# 1. TLS connect, verified I/O, the controller's TLS key.
dmesg -C
if dev=$(connect 127.0.0.1 $TLS_PORT "$TLS_NQN" --tls --hostnqn="$TLS_HOSTNQN" --hostid="$TLS_HOSTID"); then
    key=$(ctrl_tls_key)
    if [ -z "$key" ]; then
        fail "strata: connected with --tls, but the controller has no TLS key: $(tls_diag)"
    elif dd_check "$dev"; then
        pass "strata: TLS connect (controller tls_key $key, $(grep -c 'was successful' "$TLSHD_LOG" || true) handshakes), 4 MiB dd write/read-back on $dev"
    else
        fail "strata: TLS connect worked, but dd I/O on $dev failed"
    fi
    # 2. Rotation: the connected controller keeps working; new
    # handshakes need the new PSK.
    tls_cli host set "$TLS_HOSTNQN" --tls-psk generate >/dev/null
    if dd_check "$dev"; then pass "strata: TLS PSK rotation keeps the connected host (dd after the change)";
    else fail "strata: I/O of the connected host after the PSK changed"; fi
    if connect_refused 127.0.0.1 $TLS_PORT "$TLS_NQN" --tls --duplicate-connect --hostnqn="$TLS_HOSTNQN" \
        --hostid="$TLS_HOSTID"; then
        pass "strata: the old TLS PSK is refused after rotation"
    else fail "strata: the old TLS PSK still accepted after rotation"; fi
    disconnect_all
    tls_cli host set "$TLS_HOSTNQN" --tls-psk "$psk" >&2
    if dev=$(connect 127.0.0.1 $TLS_PORT "$TLS_NQN" --tls --hostnqn="$TLS_HOSTNQN" --hostid="$TLS_HOSTID") &&
        dd_check "$dev"; then
        pass "strata: the PSK set back works again (connect + dd)"
    else fail "strata: connect with the PSK set back: $(tls_diag)"; fi
    disconnect_all
else
    fail "strata: TLS connect failed: $(tls_diag)"
fi

# 3. Plain TCP to the TLS-only port, and a host strata has no PSK for.
if connect_refused 127.0.0.1 $TLS_PORT "$TLS_NQN" --hostnqn="$TLS_HOSTNQN" --hostid="$TLS_HOSTID"; then
    pass "strata: connect without TLS to the TLS-required port refused"
else fail "strata: connect without TLS to the TLS-required port accepted"; fi
if connect_refused 127.0.0.1 $TLS_PORT "$TLS_NQN" --tls --hostnqn="$TLS_INTRUDER"; then
    pass "strata: a host with a PSK strata does not know refused (${intruder_psk:0:16}...)"
else fail "strata: a host with an unknown PSK accepted"; fi
grep -q "TLS handshake failed" /tmp/strata-tls.log &&
    pass "strata: refusals logged ($(grep -m1 -o 'TLS handshake failed: [^"]*' /tmp/strata-tls.log | cut -c1-90))" ||
    fail "strata: no log line for the refused TLS handshakes"

# 4. Discovery over TLS: the log page says TLS 1.3 is required.
if out=$(timeout 60 nvme discover -t tcp -a 127.0.0.1 -s $TLS_DISC --tls --hostnqn="$TLS_HOSTNQN" \
    --hostid="$TLS_HOSTID" 2>&1); then
    if grep -q "$TLS_NQN" <<<"$out" && grep -qi "tls13\|tls 1.3" <<<"$out" && grep -qi "required" <<<"$out"; then
        pass "strata: discovery over TLS lists the subsystem with $(grep -iE 'sectype|treq' <<<"$out" | sort -u | tr -s ' ' | tr '\n' ' ')"
    else
        fail "strata: discovery over TLS: no TLS 1.3 / required entry: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"
    fi
else
    fail "strata: discovery over TLS failed: $(tr '\n' ' ' <<<"$out" | cut -c1-200) $(tls_diag)"
fi
kill -TERM "$TLS_PID"; wait "$TLS_PID" || true

# 5. The reference: the same first steps against the kernel's target.
log "kernel-tls: the kernel's target (nvmet, file-backed, addr_tsas=tls1.3) for reference"
REF_NQN=nqn.2014-08.org.example:tls-ref
tls_insert "$secret" "$TLS_HOSTNQN" "$REF_NQN" >/dev/null
modprobe loop 2>/dev/null || true
truncate -s 64M /tmp/nvmet-tls-ref.img
if REF_DEV=$(losetup -f --show /tmp/nvmet-tls-ref.img) && kernel_target_port 127.0.0.1 4460 addr_tsas=tls1.3 >/dev/null &&
    kernel_target_up "$REF_DEV" 4460 "$REF_NQN"; then
    if dev=$(connect 127.0.0.1 4460 "$REF_NQN" --tls --hostnqn="$TLS_HOSTNQN" --hostid="$TLS_HOSTID") &&
        dd_check "$dev"; then
        pass "nvmet (reference): TLS connect + 4 MiB dd write/read-back"
    else fail "nvmet (reference): TLS connect: $(tls_diag)"; fi
    disconnect_all
    if connect_refused 127.0.0.1 4460 "$REF_NQN" --hostnqn="$TLS_HOSTNQN" --hostid="$TLS_HOSTID"; then
        pass "nvmet (reference): connect without TLS to the TLS-required port refused"
    else fail "nvmet (reference): connect without TLS accepted"; fi
    kernel_target_down
    losetup -d "$REF_DEV" || true
else
    fail "nvmet (reference): could not set up the kernel target"
fi
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    print_summary
    exit "$FAILED"
fi
