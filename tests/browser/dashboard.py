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
4. without a token the page asks for one and shows no data;
5. the cluster view, from recorded answers of a cluster node served by a
   stand-in (the page's own files, fixed JSON): the nodes, a node down,
   a degraded volume and its rebuild's progress, and the verdict.

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
        cluster_view(work)
    finally:
        if bench:
            bench.kill()
            bench.wait()
        serve.terminate()
        serve.wait(timeout=60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    print("ok")


# ---------------------------------------------------------------------------
# A cluster node's answers, recorded: the same page against a stand-in API
# (the page's own files from the source tree, fixed JSON for /api/v1/pool
# and the rest), so that the cluster view (nodes, a node down, a degraded
# volume, a rebuild's progress) is drawn by the same script.

POOL = {
    "node": "n1", "map_epoch": 7,
    "nodes": [
        {"id": 1, "name": "n1", "state": "up", "capacity_bytes": 1 << 40, "allocated_bytes": 3 << 38,
         "drives": [{"path": "/dev/nvme0n1", "capacity_bytes": 1 << 40, "allocated_bytes": 3 << 38, "failed": False}]},
        {"id": 2, "name": "n2", "state": "down", "capacity_bytes": 1 << 40, "drives": []},
        {"id": 3, "name": "n3", "state": "up", "capacity_bytes": 1 << 40, "allocated_bytes": 1 << 38,
         "drives": [{"path": "/dev/nvme0n1", "capacity_bytes": 1 << 40, "allocated_bytes": 1 << 38, "failed": False}]},
    ],
    "volumes": [
        {"name": "db", "size": "1 TiB", "size_bytes": 1 << 40, "protection": "rep:3", "owner_name": "n1",
         "state": "degraded", "replicas": [1, 2, 3], "in_sync": [1, 3], "allocated_bytes": 1 << 38,
         "resync": [{"node": 3, "kind": "rebuild", "bytes_left": 1 << 30, "bytes_total": 4 << 30,
                     "rate_bytes_per_sec": 100 << 20, "eta_secs": 11}]},
        {"name": "ckpt", "size": "10 TiB", "size_bytes": 10 << 40, "protection": "ec:4+2", "owner_name": "n3",
         "state": "healthy", "replicas": [1, 2, 3], "in_sync": [1, 2, 3], "allocated_bytes": 1 << 30, "resync": []},
    ],
    "warnings": ["node n1 is 75% full"],
    "totals": {"raw_bytes": 3 << 40, "provisioned_bytes": 1 << 41, "allocated_bytes": 1 << 39},
}
VOLUMES = [{"name": "db", "size": "1 TiB", "allowed_hosts": ["nqn.host-a"]}, {"name": "ckpt", "size": "10 TiB", "allowed_hosts": []}]


def io_snapshot(t_ms, n):
    b = [0.00001 * (2 ** i) for i in range(19)]
    cum = [min(n, n * (i + 1) // 10) for i in range(20)]
    return {"time_ms": t_ms, "enabled": True, "bounds_seconds": b,
            "volumes": [{"name": "db", "in_flight": 3, "ops": {"read": {"commands": n, "bytes": n * 4096, "buckets": cum}}}],
            "hosts": [{"name": "nqn.host-a", "in_flight": 3, "ops": {"read": {"commands": n, "bytes": n * 4096, "buckets": cum}}}]}


def stand_in(port):
    import http.server
    import json
    import threading

    files = {"/": ("text/html", "index.html"), "/dashboard/app.js": ("text/javascript", "app.js"),
             "/dashboard/style.css": ("text/css", "style.css")}
    calls = {"io": 0}

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            if path in files:
                ct, name = files[path]
                body = (ROOT / "crates/strata/src/dashboard" / name).read_bytes()
                self.send_response(200)
                self.send_header("content-type", ct)
                self.end_headers()
                self.wfile.write(body)
                return
            if self.headers.get("Authorization") != "Bearer recorded":
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b'{"error": "the token is not valid"}')
                return
            if path == "/api/v1/status":
                code, body = 404, {"error": "no such endpoint"}
            elif path == "/api/v1/pool":
                code, body = 200, POOL
            elif path == "/api/v1/volumes":
                code, body = 200, VOLUMES
            elif path == "/api/v1/stats/io":
                calls["io"] += 1
                code, body = 200, io_snapshot(1_000_000 + 2000 * calls["io"], 5000 * calls["io"])
            elif path == "/api/v1/events":
                code, body = 200, {"events": [{"seq": 1, "time_ms": int(time.time() * 1000), "kind": "node.state",
                                               "severity": "error", "message": "node n2 is down (placement: up)"}],
                                   "missed": 0, "last_seq": 1}
            else:
                code, body = 404, {"error": "no"}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def cluster_view(work):
    port = free_port()
    srv = stand_in(port)
    try:
        dom = chromium(f"http://127.0.0.1:{port}/#token=recorded", work, "--dump-dom")
        for want in ("cluster, asked node n1", 'data-volume="db"', 'data-volume="ckpt"', "node n2 is down",
                     "volume db is degraded", "rebuilding to node n3, 75% done", "rep:3", "ec:4+2", "node n1 is 75% full"):
            if want not in dom:
                fail(f"cluster view: {want!r} missing:\n{dom[:4000]}")
        if 'class="pill bad">needs attention<' not in dom:
            fail("cluster view: a node down should make the verdict 'needs attention'")
        chromium(f"http://127.0.0.1:{port}/#token=recorded", work, f"--screenshot={OUT}/dashboard-cluster.png")
        print(f"cluster view (recorded answers): nodes, the node down, the degraded volume and its rebuild's progress; "
              f"{OUT}/dashboard-cluster.png")
    finally:
        srv.shutdown()


if __name__ == "__main__":
    main()
