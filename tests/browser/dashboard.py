#!/usr/bin/env python3
"""The web dashboard in a real browser (headless Chromium) against a
running `strata serve` under load:

1. a node with two volumes, one of them loaded by `strata bench` (random
   4 KiB reads and writes) for the whole test;
2. Chromium loads http://NODE/#token=TOKEN and runs the page's script;
   the DOM it ends with must show both volume names, a non-zero IOPS
   figure (the counters moving between the page's polls), the host's
   connect in the events, and a verdict;
3. two screenshots, a few seconds apart, saved to OUT (default
   target/dashboard-screens/);
4. without a token the page asks for one and shows no data.

    STRATA_BIN=target/debug/strata python3 tests/browser/dashboard.py [OUT]

Exits non-zero, saying why, on any failure.
"""

import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("STRATA_BIN", str(ROOT / "target" / "debug" / "strata"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "target" / "dashboard-screens")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def chromium(url, work, *extra):
    """Runs headless Chromium on `url`; its stdout (the DOM, with --dump-dom)."""
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--user-data-dir={work}/chrome-{time.monotonic_ns()}",
            "--window-size=1440,1100", "--virtual-time-budget=9000", *extra, url]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"chromium exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def main():
    if not os.path.exists(BIN):
        fail(f"no strata binary at {BIN} (cargo build -p strata)")
    if not os.path.exists(CHROMIUM):
        fail("no chromium: apt-get install chromium")
    OUT.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="strata-dashboard-")
    io, disc, http = free_port(), free_port(), free_port()
    log = open(os.path.join(work, "serve.log"), "w")
    serve = subprocess.Popen(
        [BIN, "serve", "--data-dir", work, "--drive", f"{work}/drive0.img:2G", "--default-volume-size", "256M",
         "--listen", f"127.0.0.1:{io}", "--discovery", f"127.0.0.1:{disc}", "--http", f"127.0.0.1:{http}"],
        stdout=log, stderr=subprocess.STDOUT)
    bench = None
    try:
        api = f"http://127.0.0.1:{http}"
        token_file = os.path.join(work, "api-token")
        deadline = time.time() + 30
        while not os.path.exists(token_file):
            if serve.poll() is not None or time.time() > deadline:
                fail("strata serve did not start: " + open(os.path.join(work, "serve.log")).read())
            time.sleep(0.1)
        time.sleep(0.5)
        token = open(token_file).read().split()[0]
        env = dict(os.environ, STRATA_TOKEN_FILE=token_file)
        made = subprocess.run([BIN, "volume", "create", "checkpoints", "--size", "128M", "--api", api],
                              capture_output=True, text=True, env=env)
        if made.returncode != 0:
            fail("volume create: " + made.stderr)
        bench = subprocess.Popen(
            [BIN, "bench", "--target", f"tcp://127.0.0.1:{io}/nqn.2026-11.io.strata:default", "--rw", "randrw",
             "--bs", "4k", "--iodepth", "4", "--runtime", "90s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)

        url = f"{api}/#token={token}"
        dom = chromium(url, work, "--dump-dom")
        for name in ("default", "checkpoints"):
            if not re.search(rf'data-volume="{name}"', dom):
                fail(f"volume {name} is not in the dashboard's table:\n{dom[:3000]}")
        m = re.search(r'id="total-iops">([^<]*)<', dom)
        if not m or not m.group(1).replace(",", "").strip().isdigit():
            fail(f"no IOPS figure: {m.group(1) if m else dom[:3000]}")
        iops = int(m.group(1).replace(",", ""))
        if iops <= 0:
            fail("IOPS is 0 while strata bench loads the node: the counters do not move")
        if "host.connected" not in dom:
            fail("the bench's connect is not in the recent events")
        verdict = re.search(r'id="verdict" class="pill (\w+)">([^<]*)<', dom)
        if not verdict:
            fail("no verdict")
        print(f"dashboard under load: volumes default and checkpoints, {iops} IOPS, verdict {verdict.group(2)!r}")

        chromium(url, work, f"--screenshot={OUT}/dashboard-1.png")
        time.sleep(4)
        chromium(url, work, f"--screenshot={OUT}/dashboard-2.png")
        for n in (1, 2):
            p = OUT / f"dashboard-{n}.png"
            if not p.exists() or p.stat().st_size < 10_000:
                fail(f"screenshot {p} missing or empty")
        print(f"screenshots: {OUT}/dashboard-1.png, {OUT}/dashboard-2.png")

        # No token: the page asks for one and shows nothing of the node.
        dom = chromium(f"{api}/", work, "--dump-dom")
        if not re.search(r'<section id="login"(?![^>]*hidden)', dom) or 'data-volume="' in dom:
            fail("without a token the page should ask for one and show no volumes")
        bad = chromium(f"{api}/#token=not-a-token", work, "--dump-dom")
        if "not valid" not in bad:
            fail("a wrong token should be refused with the API's message")
        print("without a token: asks for one; a wrong token: refused")
    finally:
        if bench:
            bench.kill()
            bench.wait()
        serve.terminate()
        serve.wait(timeout=60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
