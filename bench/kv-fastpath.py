#!/usr/bin/env python3
"""Load bandwidth of strata's KV store on the engine's own machine: the
same-host fast path against the physical limits, and RESP for contrast.
One run, ratios printed:

1. DRAM: the fast path's get_into (shared memory, one copy into the
   caller's NumPy buffer) against a copy of the same bytes from one NumPy
   buffer to another (memcpy) on this machine, one stream.
2. SSD tier: the fast path reading blocks that live only on the SSD tier
   (DRAM too small to hold them) against fio reading the tier's file
   sequentially with O_DIRECT at the same block size.
3. RESP: the same blocks with redis-py GET over 1, 2, 4 and 8 connections
   (one process each), so the fast path's gain is seen beside the
   protocol engines use today; and with strata's network client
   (``strata_kv.net.NetKV``: pipelined over 1, 2, 4 and 8 connections of
   one process, each value read straight into its NumPy buffer), the path
   an engine on another host takes.

    python3 bench/kv-fastpath.py                      # defaults below
    BLOCK=4M TOTAL=1G PASSES=3 python3 bench/kv-fastpath.py
    PARTS=ssd python3 bench/kv-fastpath.py            # only some: dram, ssd
    HUGEPAGES=1 PARTS=dram python3 ...                # the region on 2 MiB huge pages
                                                      # (sysctl vm.nr_hugepages first)
    STRATA_BIN=target/release/strata ...

Every block read is checked against what was put; the script exits
non-zero on a difference.
"""

import multiprocessing
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "clients" / "python"))
from strata_kv import PUT_STORED, StrataKV  # noqa: E402

import numpy  # noqa: E402


def size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if s[-1:] in "KMG" else s) * mult


BLOCK = size(os.environ.get("BLOCK", "4M"))
TOTAL = size(os.environ.get("TOTAL", "1G"))
PASSES = int(os.environ.get("PASSES", "3"))
BIN = os.environ.get("STRATA_BIN", str(ROOT / "target" / "release" / "strata"))
N = TOTAL // BLOCK
PARTS = set(os.environ.get("PARTS", "dram,ssd").split(","))


HUGEPAGES = os.environ.get("HUGEPAGES", "0") == "1"


def start(work, dram, ssd, extra=()):
    sock = os.path.join(work, "shm.sock")
    args = [BIN, "kv", "serve", "--listen", "127.0.0.1:0", "--dram", dram, "--ssd", ssd, "--shm", sock,
            "--admit", "all", "--allow-buffered", *extra]
    if HUGEPAGES:
        # Room for the blocks put through the fast path, on huge pages.
        args += ["--shm-hugepages", "--shm-region", str(TOTAL * 2)]
    log = open(os.path.join(work, "log"), "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("strata kv serve did not start: " + open(os.path.join(work, "log")).read())
        time.sleep(0.05)
    port = None
    while port is None and time.time() < deadline:
        for line in open(os.path.join(work, "log")):
            if "serving (RESP2/RESP3) on" in line:
                port = int(line.rsplit(":", 1)[1].split()[0])
        time.sleep(0.05)
    return proc, sock, port


def stop(proc):
    proc.terminate()
    proc.wait(timeout=120)


def blocks():
    """Distinct block contents (so a mix-up is caught), made once."""
    rng = numpy.random.default_rng(7)
    base = rng.integers(0, 255, size=BLOCK, dtype=numpy.uint8)
    out = []
    for i in range(N):
        b = base.copy()
        b[:8] = numpy.frombuffer(i.to_bytes(8, "little"), dtype=numpy.uint8)
        b[-8:] = b[:8]
        out.append(b)
    return out


def keys():
    return [f"block-{i}".encode() for i in range(N)]


def fast_loads(sock, want):
    """GB/s of get_into over every block, best pass order kept; checks."""
    dst = [numpy.empty(BLOCK, dtype=numpy.uint8) for _ in range(N)]
    rates = []
    with StrataKV(sock, namespace=b"bench") as kv:
        ks = keys()
        batch = max(1, (64 << 20) // BLOCK)
        # One pass untimed first: the destination's pages are made then,
        # as an engine's buffers are made once.
        for p in range(PASSES + 1):
            t = time.perf_counter()
            for i in range(0, N, batch):
                got = kv.get_into(ks[i : i + batch], dst[i : i + batch])
                if any(g != BLOCK for g in got):
                    sys.exit(f"a fast-path load missed: {got}")
            if p:
                rates.append(TOTAL / (time.perf_counter() - t) / 1e9)
    for i in (0, N // 2, N - 1):
        if not numpy.array_equal(dst[i], want[i]):
            sys.exit(f"block {i} read back wrong")
    return rates


def memcpy_rate(src):
    dst = [numpy.empty(BLOCK, dtype=numpy.uint8) for _ in range(N)]
    rates = []
    for p in range(PASSES + 1):
        t = time.perf_counter()
        for s, d in zip(src, dst):
            numpy.copyto(d, s)
        if p:
            rates.append(TOTAL / (time.perf_counter() - t) / 1e9)
    return rates


def resp_worker(port, ks, q):
    import redis

    r = redis.Redis(port=port)
    t = time.perf_counter()
    n = 0
    for k in ks:
        v = r.get(k)
        if v is None or len(v) != BLOCK:
            q.put(("error", k))
        n += len(v or b"")
    q.put(("bytes", n, time.perf_counter() - t))


def resp_loads(port, conns):
    # RESP keys live in the default namespace: put them there once.
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    ks = keys()
    share = [ks[i::conns] for i in range(conns)]
    t = time.perf_counter()
    ps = [ctx.Process(target=resp_worker, args=(port, s, q)) for s in share]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    wall = time.perf_counter() - t
    got = [q.get() for _ in ps]
    if any(g[0] == "error" for g in got):
        sys.exit("a RESP load missed")
    return sum(g[1] for g in got) / wall / 1e9


def net_loads(port, conns, want):
    """GB/s of NetKV.get_into over every block (medians of PASSES after
    an untimed pass); checks what it read."""
    from strata_kv.net import NetKV

    dst = [numpy.empty(BLOCK, dtype=numpy.uint8) for _ in range(N)]
    rates = []
    ks = keys()
    batch = max(conns, (256 << 20) // BLOCK)
    with NetKV(("127.0.0.1", port), connections=conns) as kv:
        for p in range(PASSES + 1):
            t = time.perf_counter()
            for i in range(0, N, batch):
                got = kv.get_into(ks[i : i + batch], dst[i : i + batch])
                if any(g != BLOCK for g in got):
                    sys.exit(f"a network load missed: {got}")
            if p:
                rates.append(TOTAL / (time.perf_counter() - t) / 1e9)
    for i in (0, N // 2, N - 1):
        if not numpy.array_equal(dst[i], want[i]):
            sys.exit(f"block {i} read back wrong over the network client")
    return rates


def cpu_seconds(pid):
    """User plus system CPU seconds a process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Skip(Exception):
    """A part left out by PARTS."""


def fmt(rates):
    return f"{statistics.median(rates):6.2f} GB/s (range {min(rates):.2f}-{max(rates):.2f})"


def main():
    if not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "-p", "strata"], cwd=ROOT, check=True)
    want = blocks()
    print(f"{N} blocks of {BLOCK >> 20} MiB ({TOTAL >> 20} MiB), {PASSES} passes each; medians and ranges")

    # 1. DRAM.
    work = tempfile.mkdtemp(prefix="kv-fastpath-")
    try:
        if "dram" not in PARTS:
            raise _Skip
        # Room for the blocks twice (fast path, then RESP) and then some.
        proc, sock, port = start(work, str(TOTAL * 3), os.path.join(work, "ssd.log") + ":64M")
        with StrataKV(sock, namespace=b"bench", staging=256 << 20) as kv:
            st = kv.put(keys(), want)
            if any(s != PUT_STORED for s in st):
                sys.exit(f"puts not stored: {st}")
        fast = fast_loads(sock, want)
        mem = memcpy_rate(want)
        print(f"DRAM   fast path get_into  {fmt(fast)}")
        print(f"DRAM   memcpy (numpy)      {fmt(mem)}")
        print(f"DRAM   ratio fast/memcpy   {statistics.median(fast) / statistics.median(mem):.2f}")

        # 3. RESP over 1-8 connections, same server (the blocks again, in
        # the default namespace).
        import redis

        r = redis.Redis(port=port)
        for k, b in zip(keys(), want):
            r.set(k, b.tobytes())
        resp = {}
        for conns in (1, 2, 4, 8):
            rate = resp_loads(port, conns)
            resp[conns] = rate
            print(f"RESP   redis-py GET x{conns}      {rate:6.2f} GB/s   fast path / RESP {statistics.median(fast) / rate:5.1f}x")
        for conns in (1, 2, 4, 8):
            net = net_loads(port, conns, want)
            print(f"RESP   NetKV get_into x{conns}    {fmt(net)}   / redis-py x{conns} {statistics.median(net) / resp[conns]:4.1f}x"
                  f"   / best redis-py {statistics.median(net) / max(resp.values()):4.1f}x")
        stop(proc)
    except _Skip:
        pass
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # 2. SSD tier: DRAM an eighth of the blocks, so the loads come from
    # the SSD tier's file.
    work = tempfile.mkdtemp(prefix="kv-fastpath-", dir=os.environ.get("SSD_DIR", str(ROOT / "target")))
    try:
        if "ssd" not in PARTS:
            raise _Skip
        log = os.path.join(work, "ssd.log")
        proc, sock, port = start(work, str(max(TOTAL // 8, 64 << 20)), f"{log}:{TOTAL * 2}")
        with StrataKV(sock, namespace=b"bench", staging=256 << 20) as kv:
            if any(s != PUT_STORED for s in kv.put(keys(), want)):
                sys.exit("puts not stored")
        time.sleep(2)  # demotion is write-behind
        cpu0 = cpu_seconds(proc.pid)
        ssd = fast_loads(sock, want)
        cpu = cpu_seconds(proc.pid) - cpu0
        stop(proc)
        # The server's CPU per GB loaded (the untimed pass included).
        print(f"SSD    server CPU          {cpu / (TOTAL * (PASSES + 1) / 1e9):6.3f} s per GB loaded")
        fio = shutil.which("fio")
        if fio:
            out = subprocess.run(
                [fio, "--name=seq", f"--filename={log}", "--rw=read", f"--bs={BLOCK}", "--direct=1",
                 f"--size={TOTAL}", "--ioengine=psync", "--output-format=terse", "--terse-version=3"],
                capture_output=True, text=True, check=True).stdout
            fio_rate = int(out.split(";")[6]) * 1024 / 1e9  # read bandwidth, KiB/s
            print(f"SSD    fast path get_into  {fmt(ssd)}")
            print(f"SSD    fio seq read O_DIRECT {fio_rate:6.2f} GB/s")
            print(f"SSD    ratio fast/fio      {statistics.median(ssd) / fio_rate:.2f}")
        else:
            print(f"SSD    fast path get_into  {fmt(ssd)}  (fio not installed: no reference)")
    except _Skip:
        pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
