#!/bin/bash
# The test suite: what README.md calls "the test command" and what CI runs.
#   bash scripts/test.sh            everything
#   SKIP_VM=1 bash scripts/test.sh  without the kernel-initiator VM tests
#   FUZZ_SECONDS=N                  seconds per fuzz target (default 20; 0 skips)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the seconds since the start, so CI logs show where the
# time goes.
step() { printf '\n==== [%ds] %s ====\n' "$SECONDS" "$*"; }

step "format"
cargo fmt --all -- --check

step "lints (warnings are errors, including missing docs)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "unit, property and integration tests"
cargo test --workspace --all-targets 2>&1 | tee /tmp/strata-cargo-test.log
cargo test --workspace --doc

step "the Python fast-path client's tests (against target/debug/strata)"
# Debian's python3 (with python3-numpy), not a pyenv one without NumPy.
cargo build -p strata --quiet
STRATA_BIN=target/debug/strata /usr/bin/python3 -m unittest discover -s clients/python/tests

step "the web dashboard in headless Chromium, and strata top in tmux, against a loaded node"
# Screenshots and the terminal capture go to target/dashboard-screens/.
STRATA_BIN=target/debug/strata /usr/bin/python3 tests/browser/dashboard.py target/dashboard-screens
STRATA_BIN=target/debug/strata bash tests/terminal/top.sh target/dashboard-screens

fuzz_seconds=${FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" != 0 ] && command -v cargo-fuzz >/dev/null 2>&1; then
    step "fuzz: ${fuzz_seconds}s per target"
    # cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP lets the stable
    # toolchain accept them.
    # Network parsers first, then the store's on-disk decoders, whole-drive
    # recovery from damaged images, the metadata store's records, and the
    # etcd client's response parsers, an erasure-coded shard's undo log,
    # the KV server's RESP parsers and its SSD log's recovery from damage,
    # the in-band authentication messages, keys and state machine, and TLS
    # PSK identities and the server's TLS handshake, and the event-stream
    # parser of `strata events --follow`.
    # No sanitizer: the targets are safe Rust (a panic or an overflow with
    # debug assertions is the failure), and ASan doubles the build. All
    # targets build in one cargo run, so the dependencies compile once.
    if ! (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build -s none >/tmp/strata-fuzz-build.log 2>&1); then
        tail -40 /tmp/strata-fuzz-build.log >&2
        echo "the fuzz targets do not build" >&2
        exit 1
    fi
    for t in pdu_decode target_transport host_parsers store_format store_recovery meta_records etcd_responses undo_log \
        kv_resp kv_shm_wire kv_recovery auth_messages tls_server events_sse; do
        (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none "$t" -- -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 2>&1 |
            grep -E "^(Done|==|.*(panicked|ERROR|SUMMARY))" || true)
        # A crash leaves an artifact; fail on it.
        if ls fuzz/artifacts/"$t"/crash-* >/dev/null 2>&1; then
            echo "fuzz target $t crashed: $(ls fuzz/artifacts/$t/crash-*)" >&2
            exit 1
        fi
    done
elif [ "$fuzz_seconds" != 0 ]; then
    echo "cargo-fuzz not installed: skipping the fuzz pass (cargo install cargo-fuzz)"
fi

if [ "${SKIP_VM:-0}" != 1 ]; then
    cargo build --release -p strata
    step "kernel initiator in a VM (Debian bookworm, Linux 6.1)"
    tests/vm/run.sh kernel-initiator.sh
    step "kernel initiator against a three-node cluster in a VM (etcd, rep:3, kill -9, resync; bookworm)"
    # 2-5 minutes under TCG on 2 cores, depending on the load.
    VM_TIMEOUT=1500 tests/vm/run.sh cluster-kernel.sh
    step "kernel initiator against an erasure-coded volume (ec:2+1, kill -9, resync, decode; bookworm)"
    VM_TIMEOUT=1500 tests/vm/run.sh cluster-ec-kernel.sh
    step "kernel initiator in a VM (Debian trixie, Linux 6.12)"
    tests/vm/run.sh kernel-initiator.sh --suite trixie
    step "Linux native multipath against a three-node cluster (every node a path, kill -9 of the owner, failback; trixie)"
    VM_TIMEOUT=1500 tests/vm/run.sh cluster-multipath.sh --suite trixie
fi
step "all tests passed"
