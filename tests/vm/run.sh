#!/bin/bash
# Runs a guest script from tests/vm/ in the nvmf-vm with the strata binary.
#   tests/vm/run.sh [kernel-initiator.sh | PATH/guest-script.sh] [nvmf-vm options...]
# Uses ../shared/vm/nvmf-vm beside the checkout (NVMF_VM to override) and
# target/release/strata (STRATA_BIN to override; built if missing).
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
case $script in */*) ;; *) script=$here/$script ;; esac
exec "$vm" run "$script" --add "$bin" --timeout "${VM_TIMEOUT:-900}" "$@"
