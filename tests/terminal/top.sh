#!/bin/bash
# `strata top` in a real terminal (tmux) against a running `strata serve`
# under load: the view refreshes in place (the pane shows one frame, not
# a scrolling log), names the loaded volume with non-zero IOPS and
# latencies, and its capture is saved to OUT (default
# target/dashboard-screens/top.txt).
#   STRATA_BIN=target/debug/strata bash tests/terminal/top.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${STRATA_BIN:-target/debug/strata}
OUT=${1:-target/dashboard-screens}
mkdir -p "$OUT"
work=$(mktemp -d)
session="strata-top-$$"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
io=$(port); disc=$(port); http=$(port)
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    kill "${bench:-}" "${serve:-}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"$BIN" serve --data-dir "$work" --drive "$work/d0.img:1G" --default-volume-size 256M \
    --listen 127.0.0.1:$io --discovery 127.0.0.1:$disc --http 127.0.0.1:$http >"$work/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do [ -s "$work/api-token" ] && break; sleep 0.1; done
[ -s "$work/api-token" ] || { cat "$work/serve.log"; echo "FAIL: strata serve did not start"; exit 1; }
"$BIN" bench --target "tcp://127.0.0.1:$io/nqn.2026-11.io.strata:default" --rw randread --bs 4k \
    --iodepth 4 --runtime 60s >/dev/null 2>&1 &
bench=$!
tmux new-session -d -s "$session" -x 120 -y 30 \
    "STRATA_TOKEN_FILE=$work/api-token $BIN top --api http://127.0.0.1:$http --interval 1s; sleep 30"
sleep 6
tmux capture-pane -p -t "$session" >"$OUT/top.txt"
cat "$OUT/top.txt"
frames=$(grep -c '^strata top' "$OUT/top.txt" || true)
[ "$frames" = 1 ] || { echo "FAIL: $frames frames in the pane: top should redraw in place"; exit 1; }
line=$(grep -E '^default ' "$OUT/top.txt") || { echo "FAIL: the loaded volume is not listed"; exit 1; }
read -r _ riops _ <<<"$line"
[ "${riops//,/}" -gt 0 ] || { echo "FAIL: read IOPS $riops under load"; exit 1; }
echo "$line" | grep -qE ' [0-9]+\.[0-9]{3} ' || { echo "FAIL: no latency figures: $line"; exit 1; }
echo "ok: strata top redraws in place; default at $riops read IOPS (capture: $OUT/top.txt)"
