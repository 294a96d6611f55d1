"""The Python client against a real ``strata kv serve``: blocks round-trip
through shared memory into NumPy arrays and other buffers, lookups agree,
and several processes reading and writing at once never see a mixed or
torn block, nor a leased block change under its reader.

    STRATA_BIN=target/debug/strata python3 -m unittest discover -s clients/python/tests

The binary defaults to target/debug/strata (then target/release/strata).
"""

import multiprocessing
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))

from strata_kv import PUT_STORED, FastPathError, StrataKV  # noqa: E402

try:
    import numpy
except ImportError:  # the client needs none; these tests use it when present
    numpy = None


def strata_bin():
    env = os.environ.get("STRATA_BIN")
    if env:
        return env
    for p in (ROOT / "target" / "debug" / "strata", ROOT / "target" / "release" / "strata"):
        if p.exists():
            return str(p)
    raise unittest.SkipTest("no strata binary: cargo build -p strata, or set STRATA_BIN")


def block(key, version, length):
    """A block naming its key and version in every 16 bytes."""
    words = length // 16 + 1
    b = b"".join(struct.pack("<QQ", key << 32 | version, i) for i in range(words))
    return b[:length]


def named(b):
    first = struct.unpack_from("<Q", b, 0)[0]
    key, version = first >> 32, first & 0xFFFFFFFF
    return (key, version) if bytes(b) == block(key, version, len(b)) else None


class Server:
    def __init__(self, dram="64M"):
        self.dir = tempfile.mkdtemp(prefix="strata-kv-py-")
        self.sock = os.path.join(self.dir, "shm.sock")
        args = [strata_bin(), "kv", "serve", "--listen", "127.0.0.1:0", "--dram", dram,
                "--ssd", os.path.join(self.dir, "ssd.log") + ":64M", "--ssd-segment", "4M",
                "--allow-buffered", "--shm", self.sock, "--threads", "2"]
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the server did not start: " + open(os.path.join(self.dir, "log")).read())
            time.sleep(0.02)

    def port(self):
        """The Redis port the server chose (it logs it once bound)."""
        deadline = time.time() + 30
        while time.time() < deadline:
            with open(os.path.join(self.dir, "log")) as log:
                for line in log:
                    if "serving (RESP2/RESP3) on" in line:
                        return int(line.rsplit(":", 1)[1].split()[0])
            time.sleep(0.02)
        raise RuntimeError("the server did not log its port: " + open(os.path.join(self.dir, "log")).read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class FastPathTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_blocks_round_trip_into_buffers(self):
        with StrataKV(self.server.sock, namespace=b"rt", staging=8 << 20) as kv:
            a, b = block(1, 1, 300_000), block(2, 1, 4096)
            self.assertEqual(kv.put([b"a", b"b"], [a, bytearray(b)]), [PUT_STORED, PUT_STORED])
            self.assertEqual(kv.exists([b"a", b"x", b"b"]), [True, False, True])
            self.assertEqual(kv.batch_exists([b"a", b"b", b"x", b"a"]), 2)
            out_a, out_b = bytearray(300_000), bytearray(8192)
            self.assertEqual(kv.get_into([b"a", b"b", b"x"], [out_a, out_b, bytearray(1)]), [300_000, 4096, None])
            self.assertEqual(bytes(out_a), a)
            self.assertEqual(bytes(out_b[:4096]), b)
            self.assertEqual(kv.get([b"b", b"nope"]), [b, None])
            with self.assertRaises(ValueError):
                kv.get_into([b"a"], [bytearray(10)])
            # Nothing leaked: a zero-copy lease still works after the error.
            with kv.leased([b"a"]) as views:
                self.assertEqual(named(views[0]), (1, 1))

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_numpy_arrays_in_and_out(self):
        with StrataKV(self.server.sock, namespace=b"np") as kv:
            x = numpy.arange(2 * 16 * 128, dtype=numpy.float32).reshape(2, 16, 128)
            self.assertEqual(kv.batch_set([b"layer0"], [x]), [True])
            y = numpy.empty_like(x)
            self.assertEqual(kv.batch_get([b"layer0"], [y]), [x.nbytes])
            self.assertTrue(numpy.array_equal(x, y))
            with kv.leased([b"layer0"]) as views:
                z = numpy.frombuffer(views[0], dtype=numpy.float32).reshape(x.shape)
                self.assertTrue(numpy.array_equal(x, z))
                del z

    def test_the_server_refuses_what_it_should(self):
        with StrataKV(self.server.sock) as kv:
            with self.assertRaises(FastPathError):
                # A namespace the store refuses (over 255 bytes is cut by
                # the wire; the store refuses nothing here, so ask for a
                # Hello twice instead).
                kv._call(0x01, struct.pack("<IQ", 1, 4096))
            # Still usable.
            self.assertEqual(kv.exists([b"k"]), [False])

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_the_worked_engine_example_runs(self):
        sys.path.insert(0, str(ROOT / "examples" / "python"))
        import hicache_backend

        hicache_backend.main(self.server.sock)

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_the_gpu_ttft_benchmark_dry_runs_on_the_cpu(self):
        # bench/gpu-ttft.py's pipeline on a tiny shape: prefill, pages
        # stored through the fast path, loaded back, checked bit-equal.
        out = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "gpu-ttft.py"), "--device", "cpu", "--tiny",
             "--tokens", "64,200", "--page", "32", "--repeat", "1", "--socket", self.server.sock],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        rows = [l for l in out.stdout.splitlines() if l.strip().startswith(("64 ", "200 "))]
        self.assertEqual(len(rows), 2, out.stdout)
        self.assertTrue(all(r.endswith("yes") for r in rows), out.stdout)
        self.assertEqual(out.stdout.splitlines()[-1], "ok")

    def test_processes_reading_and_writing_at_once_see_whole_blocks(self):
        ctx = multiprocessing.get_context("fork")
        stop = ctx.Event()
        errors = ctx.Queue()
        length, keys = 256 << 10, 8
        procs = [ctx.Process(target=_writer, args=(self.server.sock, w, keys, length, stop, errors)) for w in range(2)]
        procs += [ctx.Process(target=_reader, args=(self.server.sock, keys, stop, errors)) for _ in range(2)]
        for p in procs:
            p.start()
        time.sleep(3)
        stop.set()
        for p in procs:
            p.join(timeout=60)
        results = []
        while not errors.empty():
            results.append(errors.get())
        failures = [r for r in results if r[0] == "error"]
        self.assertEqual(failures, [])
        reads = sum(r[1] for r in results if r[0] == "reads")
        writes = sum(r[1] for r in results if r[0] == "writes")
        self.assertGreater(writes, 4 * keys, "the writers overwrote every key several times")
        self.assertGreater(reads, 20, "the readers read")
        for p in procs:
            self.assertEqual(p.exitcode, 0)


def _writer(path, w, keys, length, stop, out):
    try:
        n = 0
        with StrataKV(path, namespace=b"mp", staging=4 << 20) as kv:
            version = 1 + w
            while not stop.is_set():
                key = version % keys
                if kv.put([str(key).encode()], [block(key, version, length)]) != [PUT_STORED]:
                    out.put(("error", f"put of key {key} version {version} not stored"))
                version += 2
                n += 1
        out.put(("writes", n))
    except Exception as e:  # reported to the parent, which fails the test
        out.put(("error", repr(e)))


def _reader(path, keys, stop, out):
    try:
        n = 0
        names = [str(k).encode() for k in range(keys)]
        with StrataKV(path, namespace=b"mp") as kv:
            while not stop.is_set():
                with kv.leased(names) as views:
                    before = [None if v is None else bytes(v) for v in views]
                    for k, b in enumerate(before):
                        if b is None:
                            continue
                        got = named(b)
                        if got is None or got[0] != k:
                            out.put(("error", f"key {k}: a mixed or foreign block {got}"))
                        n += 1
                    time.sleep(0.002)
                    for v, b in zip(views, before):
                        if v is not None and bytes(v) != b:
                            out.put(("error", "a leased block changed under its reader"))
        out.put(("reads", n))
    except Exception as e:
        out.put(("error", repr(e)))


if __name__ == "__main__":
    unittest.main()
