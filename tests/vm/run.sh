#!/bin/bash
# Runs a guest script from tests/vm/ in the nvmf-vm with the strata binary.
#   tests/vm/run.sh [kernel-initiator.sh | cluster-kernel.sh | PATH/guest-script.sh] [nvmf-vm options...]
# Uses ../shared/vm/nvmf-vm beside the checkout (NVMF_VM to override) and
# target/release/strata (STRATA_BIN to override; built if missing). The
# binary is always /vm/strata in the guest, whatever its name on the host.
# A cluster-*.sh script also gets etcd (/vm/etcd; ETCD_BIN to override,
# default the etcd on PATH, e.g. Debian's etcd-server).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
script=${1:-kernel-initiator.sh}
shift || true
vm=${NVMF_VM:-}
if [ -z "$vm" ]; then
    for c in "$root/../shared/vm/nvmf-vm" "$root/../../shared/vm/nvmf-vm"; do
        [ -x "$c" ] && { vm=$c; break; }
    done
fi
[ -n "$vm" ] && [ -x "$vm" ] || { echo "run.sh: nvmf-vm not found (set NVMF_VM)" >&2; exit 2; }
bin=${STRATA_BIN:-$root/target/release/strata}
[ -x "$bin" ] || (cd "$root" && cargo build --release -p strata)
bin=$(realpath "$bin")
case $script in */*) ;; *) script=$here/$script ;; esac
# nvmf-vm copies each --add to /vm/ under its own name (following
# symbolic links): a link named strata makes any STRATA_BIN /vm/strata.
stage=$(mktemp -d "${TMPDIR:-/tmp}/strata-vm.XXXXXX")
trap 'rm -rf "$stage"' EXIT
ln -s "$bin" "$stage/strata"
adds=(--add "$stage/strata")
case $(basename "$script") in
cluster-*)
    etcd=${ETCD_BIN:-$(command -v etcd || true)}
    [ -n "$etcd" ] && [ -x "$etcd" ] ||
        { echo "run.sh: $(basename "$script") needs etcd (apt-get install etcd-server, or set ETCD_BIN)" >&2; exit 2; }
    ln -s "$(realpath "$etcd")" "$stage/etcd"
    adds+=(--add "$stage/etcd")
    # cluster-ec-kernel.sh runs cluster-kernel.sh with another protection.
    adds+=(--add "$here/cluster-kernel.sh")
    ;;
esac
case $(basename "$script") in
kernel-initiator.sh) adds+=(--add "$here/kernel-dhchap.sh" --add "$here/kernel-tls.sh") ;;
esac
rc=0
"$vm" run "$script" "${adds[@]}" --timeout "${VM_TIMEOUT:-900}" "$@" || rc=$?
exit "$rc"
